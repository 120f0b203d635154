"""Stop signals: caught at any instant, from any thread, never lost before `wait()`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from vke_gpu_dra.shutdown import StopSignals


def run_script(body: str) -> subprocess.CompletedProcess[str]:
    """`body` in a fresh interpreter, where it owns the main thread and its signal handlers."""
    script = "import os, signal, threading, time\nfrom vke_gpu_dra.shutdown import StopSignals\n"
    return subprocess.run(
        [sys.executable, "-c", script + textwrap.dedent(body)],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip


def test_a_signal_before_wait_ends_the_wait_at_once() -> None:
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait() is signal.SIGTERM


def test_a_signal_delivered_to_another_thread_wakes_the_main_thread() -> None:
    # The kernel may hand a process-directed signal to any thread (a gRPC or API-client thread).
    # A main thread asleep on a threading.Event would never notice; the wake-up pipe does.
    proc = run_script("""
        with StopSignals() as stop:
            def deliver():
                time.sleep(0.2)
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread
            threading.Thread(target=deliver).start()
            print(stop.wait().name)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "SIGTERM"


def test_sigint_ends_the_wait_and_other_signals_do_not() -> None:
    proc = run_script("""
        seen = []
        signal.signal(signal.SIGUSR1, lambda *_: seen.append("usr1"))
        with StopSignals() as stop:
            def deliver():
                time.sleep(0.1)
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.3)
                os.kill(os.getpid(), signal.SIGINT)
            threading.Thread(target=deliver).start()
            print(stop.wait().name, seen)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "SIGINT ['usr1']"


def test_the_previous_handlers_and_wakeup_fd_come_back() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd)
    try:
        with StopSignals():
            assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        assert {s: signal.getsignal(s) for s in before} == before
        assert signal.set_wakeup_fd(write_fd) == write_fd
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.close(read_fd)
        os.close(write_fd)


def test_only_the_main_thread_can_catch_signals() -> None:
    errors: list[BaseException] = []

    def enter() -> None:
        try:
            with StopSignals():
                pass
        except ValueError as err:
            errors.append(err)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    [error] = errors
    assert "main thread" in str(error)
    assert signal.set_wakeup_fd(-1) == -1  # nothing left installed


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_plugin_process_stops_on_either_signal_during_start_up(signum: signal.Signals) -> None:
    # The signal arrives before start-up ends: it is kept, and the plugin stops right after.
    proc = run_script(f"""
        import logging
        from vke_gpu_dra import plugin
        logging.basicConfig(level=logging.INFO, format="%(message)s")

        class Early(plugin.Plugin):
            def start(self):
                os.kill(os.getpid(), {int(signum)})
                time.sleep(0.2)

            def stop(self, grace=None):
                print("stopped")

        print(Early.__new__(Early).run())  # only run(), start() and stop() are used
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["stopped", "0"]
    assert "signal received, shutting down" in proc.stderr
