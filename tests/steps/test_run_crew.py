"""The words of a distributed `pate run` (`pate.steps.pipeline._Crew` on process 0, `_follow` on
the others), without processes: a fake cluster records the agreements. The real processes:
tests/steps/test_run_distributed.py (slow)."""

from __future__ import annotations

import pytest

from analysis.core.errors import PateError
from pate.steps import pipeline


class FakeCluster:
    """Records process 0's agreements; on another process, answers with `words` in turn."""

    def __init__(self, count=2, index=0, words=()):
        self.count, self.index, self.words = count, index, list(words)
        self.said, self.dissolved = [], 0

    def agree(self, value=0, failure=None, last=False):
        self.said.append((value, failure))
        return self.words.pop(0) if self.words else value

    def dissolve(self):
        self.dissolved += 1

    def rows(self, num_rows):
        per = -(-num_rows // self.count)
        return range(min(self.index * per, num_rows), min((self.index + 1) * per, num_rows))


def test_round_2_is_a_shared_step_after_round_1s_student_and_report():
    """With two rounds the others wait (no "done") while process 0 trains round 1's student and
    writes its report, then take round 2 with it, then leave."""
    assert pipeline.SHARED.index("round2") == 2
    cluster = FakeCluster()
    crew = pipeline._Crew(cluster)
    crew.tell("label", pipeline._RUN)
    crew.back()
    assert crew.waiting and not crew.done  # process 0 alone: the student, the report
    crew.tell("round2", pipeline._RUN)
    crew.back()
    crew.finish()
    assert cluster.said == [(5, None), (9, None), (pipeline._DONE, None)] and cluster.dissolved == 1


def test_process_0_names_each_shared_step_then_says_done_once():
    cluster = FakeCluster()
    crew = pipeline._Crew(cluster)
    crew.tell("teachers", pipeline._RUN)
    assert not crew.waiting  # the others are in the step with process 0
    crew.back()
    crew.tell("label", pipeline._SKIP)
    assert crew.waiting  # skipped: they wait for the next word
    crew.finish()
    crew.finish()  # said once
    crew.fail(PateError("later"))  # after "done" nobody waits: nothing said
    assert cluster.said == [(1, None), (4, None), (pipeline._DONE, None)] and cluster.dissolved == 1
    assert crew.done and not crew.waiting


def test_a_failure_is_told_only_to_processes_waiting_for_process_0():
    cluster = FakeCluster()
    crew = pipeline._Crew(cluster)
    crew.tell("teachers", pipeline._RESUME)  # value 2: resume
    crew.fail(PateError("inside the step"))  # the step's own failure: its own path tells them
    assert cluster.said == [(2, None)]
    crew.back()
    crew.fail(PateError("no   room\nleft"))  # between steps: they wait, so they are told, in one line
    crew.fail(PateError("again"))  # told once
    assert cluster.said == [(2, None), (0, "no room left")]


def test_one_process_says_nothing():
    cluster = FakeCluster(count=1)
    crew = pipeline._Crew(cluster)
    crew.tell("teachers", pipeline._RUN)
    crew.back()
    crew.finish()
    crew.fail(PateError("x"))
    assert cluster.said == [] and cluster.dissolved == 0


@pytest.mark.parametrize("words, calls, line", [
    ([0, 4, pipeline._DONE], [], "had nothing to do (the teachers and labels are up to date)"),
    ([1, 5, pipeline._DONE], [("teachers", False, True), ("label",)],
     "trained its part of the teachers, voted with teachers 3-5"),
    ([2, 4, pipeline._DONE], [("teachers", True, False)], "trained its part of the teachers"),
    # [rounds] rounds = 2: round 2 after process 0 trained round 1's student and wrote its report alone
    ([0, 4, 9, pipeline._DONE], [("round2",)], "voted with round-2 heads 3-5"),
    ([1, 5, 8, pipeline._DONE], [("teachers", False, True), ("label",)],
     "trained its part of the teachers, voted with teachers 3-5"),
])
def test_another_process_takes_the_steps_process_0_names(monkeypatch, tiny_config, tmp_path, words, calls, line):
    from pate.steps import label, label_round2, teachers

    made = []
    monkeypatch.setattr(teachers, "train_teachers", lambda config, workdir, *, resume, overwrite, **_:
                        made.append(("teachers", resume, overwrite)))
    monkeypatch.setattr(label, "label", lambda config, workdir, **_: made.append(("label",)))
    monkeypatch.setattr(label_round2, "label_round2", lambda config, workdir, **_: made.append(("round2",)))
    cluster, said = FakeCluster(index=1, words=words), []
    assert pipeline._follow(tiny_config, tmp_path, cluster, 0, said.append) is None
    assert made == calls and cluster.dissolved == 1
    assert said == [f"process 1 of 2: {line}; process 0 trains the student and writes the report alone"]
