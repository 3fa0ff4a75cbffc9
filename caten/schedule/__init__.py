"""Kernel fusion and memory planning: `scheduler.schedule` makes a `model.Schedule` (its buffers,
kernels and stages, the arena plan) from a program; `plan` decides each reduction, `split` a
kernel's threads, `arena` where temporaries live. The two names a caller needs are here."""

from caten.schedule.model import Schedule
from caten.schedule.scheduler import schedule

__all__ = ["Schedule", "schedule"]
