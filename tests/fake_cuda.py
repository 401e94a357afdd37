"""A fake ``torch.cuda`` for the bench tests: events read a shared clock that the fake tensors
advance by each operation's modelled time, so a timed figure can be checked by hand."""

from __future__ import annotations

import contextlib


class Clock:
    t = 0.0


class Event:
    def __init__(self, enable_timing=True):
        self.at = None

    def record(self):
        self.at = Clock.t

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


class Cuda:
    Event = Event

    def device(self, i):
        return contextlib.nullcontext()

    def synchronize(self, i=None):
        pass
