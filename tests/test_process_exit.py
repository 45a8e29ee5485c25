"""evoteam.process_exit: a command ends without the interpreter's teardown, and loses nothing by it."""

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import atexit, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from evoteam.process_exit import run

    def main():
        atexit.register(lambda: print("atexit ran", flush=False))
        # a non-daemon thread and a pool's worker still busy when main returns: both finish first, as at a normal end
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
        ThreadPoolExecutor(1).submit(lambda: (time.sleep(0.3), print("pool job finished")))
        sys.stdout.write("buffered, no newline")  # written at the end, not lost
        return CODE

    run(main)
""")


@pytest.mark.parametrize("code, status", [("0", 0), ("None", 0), ("3", 3), ("'a message'", 1)])
def test_the_end_keeps_threads_atexit_output_and_the_status(code, status):
    proc = subprocess.run([sys.executable, "-c", PROGRAM.replace("CODE", code)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == status, proc.stderr
    assert "thread finished" in proc.stdout and "pool job finished" in proc.stdout
    assert "atexit ran" in proc.stdout and "buffered, no newline" in proc.stdout
    assert proc.stdout.index("thread finished") < proc.stdout.index("atexit ran")  # the interpreter's order
    if status == 1:
        assert proc.stderr.strip() == "a message"


def test_sys_exit_inside_main_and_an_exception_end_as_before():
    exits = subprocess.run([sys.executable, "-c", "import sys\nfrom evoteam.process_exit import run\n"
                            "run(lambda: sys.exit(130))"], capture_output=True, text=True, timeout=60)
    assert exits.returncode == 130
    raises = subprocess.run([sys.executable, "-c", "from evoteam.process_exit import run\n"
                             "def main():\n    raise ValueError('planted')\nrun(main)"],
                            capture_output=True, text=True, timeout=60)
    assert raises.returncode == 1 and "ValueError: planted" in raises.stderr and "Traceback" in raises.stderr


def test_torch_operators_are_left_registered_and_other_finalizers_still_run():
    """PyTorch's libraries unregister their operators at exit (a weakref.finalize each): work for a dispatcher the
    process drops, skipped; a finalizer of the command's own still runs."""
    program = textwrap.dedent("""
        import weakref, torch, torch.library
        from evoteam.process_exit import run

        real = torch.library._del_library
        torch.library._del_library = lambda *a: print("unregistered", flush=True)
        for finalizer, info in list(weakref.finalize._registry.items()):
            if info.func is real:
                info.func = torch.library._del_library
        lib = torch.library.Library("evoteam_exit_test", "DEF")
        lib.define("probe(Tensor x) -> Tensor")

        class Owned:
            pass

        kept = Owned()
        weakref.finalize(kept, lambda: print("own finalizer ran", flush=True))

        def main():
            print("libraries", sum(i.func is torch.library._del_library for i in weakref.finalize._registry.values()))
            return 0

        run(main)
        """)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split("libraries ")[1].split()[0]) > 100  # torch's own and the one made here
    assert "own finalizer ran" in proc.stdout and "unregistered" not in proc.stdout
