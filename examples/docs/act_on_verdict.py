"""Acting on a verdict: every rank receives it, calls its callback and, with policy="stop",
stops before the same step. Three ranks run here as threads of one process (transport "local")
taking turns; in a real job each rank is a process and the calls are the same."""
import os
import time

import laggard

WORLD = 3
ranks = [laggard.Analyzer(interval=1, rank=r, world_size=WORLD, transport="local",
                          channel="act-on-verdict-%d" % os.getpid(), host="node-%d" % r,
                          resources=False, policy="stop", stop_after_windows=3, stop_lead_s=0.5)
         for r in range(WORLD)]


@ranks[0].on_straggler
def page(v):  # a laggard.policy.Verdict, called on rank 0's training thread
    print("verdict: rank %d (%s) in %s, %.2fx, costs %.1f ms a step (%.0f%% of the step)"
          % (v.rank, v.host, v.stage, v.slowdown, v.cost_ms, 100 * v.cost_share))


for step in range(300):
    if ranks[0].should_stop:  # True on every rank at the same step boundary
        print("stopped before step %d: %s" % (step, ranks[0].stop_reason))
        break  # write a checkpoint here: every rank is at the same step
    for r, an in enumerate(ranks):
        an.begin_step(step)
        forward = 0.025 if r == 2 and step >= 20 else 0.010  # rank 2 slows down at step 20
        with an.section("forward"):
            time.sleep(forward)
        with an.section("communication", kind="communication"):
            time.sleep(0.030 - forward)  # the others wait for the slow rank here
        an.end_step()
for an in reversed(ranks):
    an.close()
assert ranks[0].stop_step and all(an.stop_step == ranks[0].stop_step for an in ranks)
assert "rank 2" in ranks[0].stop_reason
