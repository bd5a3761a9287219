"""After a full disk, a retry waits for the room the next checkpoint needs, and says how much to free where."""

from __future__ import annotations

from jobtrail.models import TerminationReason as R
from jobtrail.outcomes.retry import AttemptFacts, DiskRoom, JobFacts, decide

HYPER = {"per_device_train_batch_size": 4, "save_steps": 50}
FULL = [AttemptFacts(number=1, reason=R.DISK_FULL, config_sha256="A", last_step=40, start_step=None)]
GB = 1_000_000_000


def _job(free: int, needed: int | None) -> JobFacts:
    return JobFacts(job_id="jt-x", disk=DiskRoom("/data/runs/jt-x/output/checkpoint-50", free, needed))


def test_still_short_of_room_it_is_refused_by_hand_and_automatically_saying_how_much_to_free_where():
    for automatic in (False, True):
        refused = decide(FULL, HYPER, None, automatic=automatic, job=_job(free=GB // 2, needed=2 * GB))
        assert not refused.retry
        assert refused.message == (
            "Not retried: /data/runs/jt-x/output/checkpoint-50 still has only 500.0 MB free, and the next checkpoint "
            "needs about 2.0 GB."
        )
        assert refused.fix and refused.fix.startswith(
            "Free at least 1.5 GB on the disk holding /data/runs/jt-x/output/checkpoint-50"
        )
        assert refused.fix.endswith("then retry it once.")


def test_with_the_room_back_it_is_retried_once_automatically_too():
    for automatic in (False, True):
        decision = decide(FULL, HYPER, None, automatic=automatic, job=_job(free=3 * GB, needed=2 * GB))
        assert decision.retry and decision.message == "Retrying after disk_full (1 of 1)."
    second = [*FULL, AttemptFacts(number=2, reason=R.DISK_FULL, config_sha256="A", last_step=90, start_step=50)]
    spent = decide(second, HYPER, None, job=_job(free=3 * GB, needed=2 * GB))
    assert not spent.retry and "budget for disk_full is spent (1 of 1)" in spent.message


def test_where_the_need_is_not_known_a_retry_by_hand_is_taken_and_an_automatic_one_is_not():
    unknown = _job(free=3 * GB, needed=None)
    assert decide(FULL, HYPER, None, job=unknown).retry
    automatic = decide(FULL, HYPER, None, automatic=True, job=unknown)
    assert not automatic.retry and "(/data/runs/jt-x/output/checkpoint-50: 3.0 GB free now)" in automatic.message
    # A job that ran elsewhere (its disk cannot be looked at from here): the same, without the numbers.
    elsewhere = decide(FULL, HYPER, None, automatic=True, job=JobFacts(job_id="jt-x"))
    assert not elsewhere.retry and "nothing says it has room again" in elsewhere.message
    assert decide(FULL, HYPER, None, job=JobFacts(job_id="jt-x")).retry


def test_a_change_that_needs_less_disk_is_retried_even_while_the_disk_is_short():
    short = _job(free=GB // 2, needed=2 * GB)
    fewer = decide(FULL, HYPER, {"save_total_limit": 1}, job=short)
    assert fewer.retry and fewer.changes == {"save_total_limit": 1}
    assert decide(FULL, HYPER, {"flavor": "a100-large"}, automatic=True, job=short).retry
