"""The signal regime (labctl/signals.py), its handler called as the kernel would: a signal
stops a running lab (Interrupted), waits while it is cleaned up, and a second one cuts a
protected phase short. Real signals on real runs: tests/test_driver.py, tests/test_lab.py."""
import signal

import pytest

from labctl.errors import Interrupted
from labctl.signals import HANDLED_SIGNALS, Signals, signals_raise


def test_a_signal_raises_while_the_lab_runs_and_waits_once_it_is_cleaned_up():
    state = Signals()
    with pytest.raises(Interrupted) as raised:
        state.handler(signal.SIGTERM, None)
    assert raised.value.signal == "SIGTERM" and not state.raising
    state.handler(signal.SIGINT, None)                 # cleaning up: noted only
    assert state.deferred == [signal.SIGINT] and state.seen == 2


def test_a_second_signal_cuts_a_protected_phase_short_and_the_first_is_said():
    said = []
    state = Signals.deferring()
    state.say = said.append
    with state.collection():
        state.handler(signal.SIGINT, None)             # the first: noted, the work goes on
        with pytest.raises(Interrupted):
            state.handler(signal.SIGINT, None)
    assert state.deferred == [signal.SIGINT] and state.protecting is None
    assert said == ["SIGINT: collecting the logs first; send it again to cut the collection short "
                    "(the lab is then kept for `labctl down`)"]


def test_the_handlers_are_installed_for_the_regime_and_put_back_after_it():
    before = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    with signals_raise() as state:
        assert all(signal.getsignal(s) == state.handler for s in HANDLED_SIGNALS)
    assert {s: signal.getsignal(s) for s in HANDLED_SIGNALS} == before
    given = Signals.deferring()
    with signals_raise(given) as held:                 # a caller's regime: nothing installed
        assert held is given and signal.getsignal(signal.SIGINT) == before[signal.SIGINT]
