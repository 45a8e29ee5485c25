"""Intervals and verdicts where the truth is known: synthetic runs drawn from known distributions."""

import numpy
import pytest

from evoteam.uncertainty import fast_p, geomean_interval, paired_difference


def test_the_geomean_interval_covers_the_true_geomean_about_95_percent_of_the_time():
    """Calibration: 300 seeded experiments of 20 log-normal speedups (true geometric mean 1.2x); the 95% interval
    must cover 1.2 in about 95% of them (a binomial's spread around 285 of 300 is about 4)."""
    rng = numpy.random.default_rng(1)
    covered = 0
    for trial in range(300):
        speedups = numpy.exp(rng.normal(numpy.log(1.2), 0.3, size=20))
        est = geomean_interval(speedups, seed=trial)
        covered += est.low <= 1.2 <= est.high
    assert 0.90 <= covered / 300 <= 0.99, covered


def test_two_identical_configurations_are_within_noise_and_a_real_difference_is_found():
    """Paired runs (same seeds): a configuration against itself (both draw from one distribution, with a per-seed
    effect both share) is called within noise in about 95% of experiments; one 20% better is called better."""
    rng = numpy.random.default_rng(2)
    same = better = 0
    for trial in range(200):
        seed_effect = numpy.exp(rng.normal(0.0, 0.2, size=6))  # some seeds are easier for every configuration
        a = 1.1 * seed_effect * numpy.exp(rng.normal(0.0, 0.05, size=6))
        b = 1.1 * seed_effect * numpy.exp(rng.normal(0.0, 0.05, size=6))
        c = 1.32 * seed_effect * numpy.exp(rng.normal(0.0, 0.05, size=6))
        same += paired_difference(a, b, seed=trial).verdict == "within noise"
        better += paired_difference(a, c, seed=trial).verdict == "b better"
    assert same / 200 >= 0.88, same
    assert better / 200 >= 0.95, better
    verdict = paired_difference([1.13, 1.129], [1.133, 1.13])
    assert verdict.verdict == "within noise" and verdict.p_value is not None


def test_too_few_or_degenerate_inputs_say_so():
    assert geomean_interval([]).value is None
    one = geomean_interval([1.5])
    assert one.value == pytest.approx(1.5) and one.low is None and one.text() == "1.500x"
    assert geomean_interval([2.0, 2.0, 2.0]).text() == "2.000x [2.000, 2.000]"
    assert paired_difference([1.1], [1.2]).verdict == "too few pairs"
    assert paired_difference([1.1, 1.2], [1.1, 1.2]).verdict == "within noise"


def test_fast_p_counts_correct_workloads_faster_than_p_times_the_baseline():
    speedups = [0.9, 1.05, 1.2, 1.3, None]  # None: a workload that failed its check
    assert fast_p(speedups, 1.0) == pytest.approx(3 / 5)
    assert fast_p(speedups, 1.1) == pytest.approx(2 / 5)
    assert fast_p(speedups, 1.25) == pytest.approx(1 / 5)
    assert fast_p([], 1.0) is None


def test_the_compare_table_pairs_runs_by_seed_and_gives_every_cell_its_interval():
    from evoteam import compare

    rng = numpy.random.default_rng(3)
    rows = []
    for seed in range(1, 7):
        easy = float(numpy.exp(rng.normal(0, 0.1)))  # a seed's draw moves every preset alike
        for team, level in (("single", 1.10), ("fixed4", 1.10), ("evolving", 1.40)):
            for budget, extra in (("equal", 1.0), ("extra", 1.0)):
                noise = float(numpy.exp(rng.normal(0, 0.01)))
                rows.append(compare.RunRow(run_id=f"{team}-{budget}-{seed}", team=team, hardware="cpu",
                                           task="mla_decode", budget=budget, sweep_id="s", geomean=level * extra
                                           * easy * noise, wins=1, workloads=4, passed=4, tokens=0, cost=0,
                                           evaluations=2, seed=str(seed)))
    table = compare.build_table(rows)
    assert [r.team for r in table] == ["single", "fixed4", "evolving"]
    for r in table:
        cell = r.cells["equal"]
        assert cell.runs == 6 and cell.interval.low < cell.geomean < cell.interval.high
        assert r.paired.verdict == "within noise"  # extra budget bought nothing here, and it says so
    verdicts = {(p.budget, p.a, p.b): p.paired.verdict for p in compare.preset_pairs(table)}
    assert verdicts[("equal", "single", "fixed4")] == "within noise"
    assert verdicts[("equal", "single", "evolving")] == "b better"
    assert verdicts[("extra", "fixed4", "evolving")] == "b better"
    text = compare.markdown(table, compare.preset_pairs(table))
    assert "[95% CI]" in text and "within noise (p " in text and "b better" in text
    assert "equal_geomean_ci_low" in compare.csv_text(table).splitlines()[0]


def test_the_geomean_interval_has_one_name_in_bench_mlflow_and_compare():
    """Issue 54: bench's JSON called it geomean_low/_high, MLflow final_geomean_ci_low/_high. Now the summary's own
    field names are the MLflow names less final_ (and compare's columns, <budget>_geomean_ci_low)."""
    from evoteam import report
    from evoteam.harness.model import Status, WorkloadResult
    from evoteam.tracking.tracker import final_metrics

    results = [WorkloadResult(uuid=f"w{i}", status=Status.PASSED, baseline="reference", timing_mode="cputime",
                              baseline_ms=1.0, candidate_ms=1.0 / s) for i, s in enumerate([1.1, 1.3, 0.9, 1.2])]
    summary = report.summarize(results)
    assert summary.geomean_ci_low is not None and summary.geomean_ci_high is not None
    metrics = final_metrics(summary)
    for name, value in vars(summary).items():
        if name in ("worst_workload", "max_noise", "fast_p"):
            continue
        assert metrics[f"final_{name}"] == value, name
    assert f"[{summary.geomean_ci_low:.3f}, {summary.geomean_ci_high:.3f}]" in summary.line()


def test_a_table_where_nothing_was_timed_says_so():
    """Issue 54: every workload failed -> 'baseline baseline; timing mode -; geomean speedup -x'."""
    from evoteam import report
    from evoteam.harness.model import Status, WorkloadResult

    table = report.format_table([WorkloadResult(uuid="2eac5b85", status=Status.REJECTED, detail="syntax")],
                                {"2eac5b85": "batch_size=1"}, "k")
    assert "baseline not run; timing mode none (nothing was timed)" in table, table
    assert "0/1 passed; wins 0; geomean speedup -; worst -; max noise -;" in table, table
    assert "baseline baseline" not in table and "-x" not in table and "-%" not in table, table


def test_compare_help_says_that_it_reports_intervals(capsys):
    from evoteam import compare

    with pytest.raises(SystemExit) as done:
        compare.main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "with its 95% bootstrap interval" in text and "permutation test's p-value" in text, text
