"""What the tests share and run beside them: the kill -9 soaks (also run on their own, with
more stops: ``python tests/support/kill9_soak.py --kills 200``), the fault injector they run
``rmqdelay`` under (KILL_POINTS, TIMER_KILL_POINTS: where the suite's kill tests stop it), and
the warm-up that compiles the numba loops before a test run (warmloops.py). The checks they end
with are the package's (rmqdelay.schedule.audit, rmqdelay.timer.audit). Nothing in benchmarks/
imports from here, nor anything here from benchmarks/."""
