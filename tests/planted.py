"""Planted cheating or failing candidates, made from the correct plain-PyTorch MLA candidate
(`tests/data/candidates/mla_torch.py`) by adding lines at its top or at the start of `run`.

    python tests/planted.py DIR    writes every planted candidate into DIR (the GPU report uses it)
"""

import sys
from pathlib import Path

CORRECT = Path(__file__).resolve().parent / "data" / "candidates" / "mla_torch.py"

# name -> (what it plants, lines after the imports, lines at the start of run())
PLANTED = {
    "crash_on_batch16": ("crashes its process (abort) on batch-16 workloads", "import os\n",
                         "    if q_nope.shape[0] == 16:\n        os.abort()\n"),
    "hang_on_batch16": ("hangs on batch-16 workloads", "", "    while q_nope.shape[0] == 16:\n        pass\n"),
    "skips_work_when_timed": ("is right on its first 3 calls (the checks), then stops computing", "_calls = [0]\n",
                              "    _calls[0] += 1\n    if _calls[0] > 3:\n        return\n"),
    "imports_flashinfer": ("imports the baseline library", "import flashinfer  # noqa: F401\n", ""),
    "reads_reference": ("reads the task's reference file", "",
                        "    open('kernels/mla_decode/reference.py').read()\n"),
    "uses_evoteam": ("imports the harness (and with it the reference)",
                     "from evoteam.task import load_task  # noqa: F401\n", ""),
    "out_of_memory": ("asks for far more memory than there is", "",
                      "    torch.empty(1 << 62, dtype=torch.uint8, device=q_nope.device)\n"),
}


def source(name: str) -> str:
    return variant(*PLANTED[name])


def variant(what: str, header: str, prologue: str) -> str:
    """The correct candidate with `header` after its imports and `prologue` at the start of run()."""
    text = CORRECT.read_text()
    head, sep, body = text.partition("\n\n\ndef run(")
    signature, colon_newline, rest = body.partition(":\n")
    imports = head.split('"""', 2)[2].strip()
    return (f'"""Planted candidate: {what}."""\n\n{imports}\n{header}\n\ndef run(' + signature + colon_newline
            + prologue + rest)


def write_planted(directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in PLANTED:
        paths[name] = directory / f"{name}.py"
        paths[name].write_text(source(name))
    return paths


if __name__ == "__main__":
    for path in write_planted(Path(sys.argv[1])).values():
        print(path)
