"""scripts/probes.py: the options the GPU probes share."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import probes  # noqa: E402


def test_parser_has_the_shared_options_and_takes_the_callers():
    p = probes.parser("probe", ["aaaa"], reps=7)
    p.add_argument("kernel", nargs="?", default="k.py")
    defaults = p.parse_args([])
    assert (defaults.points, defaults.workloads, defaults.reps, defaults.json, defaults.deadline) == \
        ("[{}]", ["aaaa"], 7, None, 0)
    args = p.parse_args(["x.py", "--points", '[{"BV": 16}]', "--workloads", "b", "c", "--json", "o.json",
                         "--deadline", "30", "--reps", "3"])
    assert (args.kernel, args.points, args.workloads, args.json, args.deadline, args.reps) == \
        ("x.py", '[{"BV": 16}]', ["b", "c"], Path("o.json"), 30.0, 3)
