"""The wheel's data: kernels/, hardware/ and conf/ go inside the package (evoteam/_data/, read by
evoteam.resources), and of kernels/ only what a run reads: a task's notes (*.md) and the script that
made its workloads stay in the repository and the sdist."""

from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

DATA_FOLDERS = ("kernels", "hardware", "conf")
NOT_SHIPPED = ("*.md", "make_workloads.py")


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        for folder in DATA_FOLDERS:
            for path in sorted((root / folder).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and not any(
                        path.match(pattern) for pattern in NOT_SHIPPED):
                    build_data["force_include"][str(path)] = f"evoteam/_data/{path.relative_to(root).as_posix()}"
