"""The webhook for clients without tasks: a real HTTP endpoint on loopback checks what `serve` POSTs when a job ends
(its summary and next calls, signed, retried after a 500, with no secret value in it), what the receipt records,
and that an endpoint that never answers delays no tool call. The jobs are ledger records (no training runs): the
payload is inspect's view of them."""

from __future__ import annotations

import json
import re
import socket

import pytest

from jobtrail.app import build_service
from jobtrail.errors import InvalidRequestError
from jobtrail.models import TerminationReason
from jobtrail.service.change_feed import Change, JobChange
from jobtrail.service.webhook import SIGNATURE_HEADER, Webhook, WebhookSettings, webhook_settings
from jobtrail.surface.server import build_server
from support.mcp_client import call_tool
from support.records import add_ended_run
from support.waiting import wait_for
from support.webhook_receiver import webhook_receiver

HOOK_SECRET = "whsec-0123456789abcdef"
JOB_SECRET = "tok-live-9f8e7d6c5b4a3210"  # a credential of the server's environment (its name says so)


def _ended(service, job_id: str, message: str = "") -> JobChange:
    add_ended_run(
        service.ledger,
        job_id,
        TerminationReason.HUB_ERROR,
        run={"model": f"/models/{JOB_SECRET}/base"},
        termination_message=message or "the push failed",
    )
    return JobChange(job_id, Change.ENDED, 1, "hub_error")


def test_a_notice_is_signed_summarised_retried_after_a_500_and_carries_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVICE_API_TOKEN", JOB_SECRET)
    service = build_service(tmp_path / "home")
    change = _ended(service, "jt-hook0001", f"push refused for token {JOB_SECRET} (signing key {HOOK_SECRET})")
    with webhook_receiver([500]) as hook:
        settings = WebhookSettings(url=hook.url, secret=HOOK_SECRET, tries=3, backoff_s=0.01)
        outcome = Webhook(settings, lambda: service).deliver(change)
        assert outcome is not None and (outcome.sent, outcome.status_code, outcome.tries) == (True, 200, 2)
        assert hook.answered == [500, 200]
        first, second = hook.received
    assert first.body == second.body and second.signed_by(HOOK_SECRET)  # the same body, tried again
    assert not second.signed_by("another secret")
    assert second.headers["X-Jobtrail-Event"] == "ended"
    assert second.headers["X-Jobtrail-Delivery"] == "jt-hook0001/ended:1"
    payload = second.payload
    assert payload["event"] == "ended" and payload["job_id"] == "jt-hook0001" and payload["status"] == "failed"
    assert payload["termination_reason"] == "hub_error" and payload["summary"].startswith("**jt-hook0001**: failed")
    assert payload["next_steps"] and all({"action", "kind", "call", "why"} <= set(s) for s in payload["next_steps"])
    # Neither the job's secret (in its model path and its message) nor the webhook's own secret, in any form.
    body = second.body.decode()
    assert JOB_SECRET not in body and HOOK_SECRET not in body and "[REDACTED]" in body
    assert payload["model"] == "/models/[REDACTED]/base"

    # The receipt records it; the same notice is never sent twice (another server that claims it is refused).
    [record] = service.ledger.deliveries("jt-hook0001")
    assert (record.notice, record.sent, record.status_code, record.tries, record.error) == (
        "ended:1",
        True,
        200,
        2,
        None,
    )
    receipt = service.inspect("jt-hook0001")
    assert receipt.webhooks == [record] and "Webhook ended:1: sent (HTTP 200, 2 tries)." in receipt.to_markdown()
    assert Webhook(settings, lambda: service).deliver(change) is None


def test_retries_are_bounded_and_only_for_what_may_pass(tmp_path):
    service = build_service(tmp_path / "home")
    with webhook_receiver([503, 502, 500, 404]) as hook:
        settings = WebhookSettings(url=hook.url, tries=3, backoff_s=0.01)
        sent = Webhook(settings, lambda: service)
        failed = sent.deliver(_ended(service, "jt-hook0002"))
        refused = sent.deliver(_ended(service, "jt-hook0003"))
        assert hook.answered == [503, 502, 500, 404]
    assert failed is not None and (failed.sent, failed.status_code, failed.tries) == (False, 500, 3)
    assert refused is not None and (refused.sent, refused.status_code, refused.tries) == (False, 404, 1)
    [record] = service.ledger.deliveries("jt-hook0002")
    assert (record.state, record.error) == ("failed", "the endpoint answered HTTP 500")

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/hook"
    unreachable = Webhook(WebhookSettings(url=closed, tries=2, backoff_s=0.01), lambda: service)
    outcome = unreachable.deliver(_ended(service, "jt-hook0004"))
    assert outcome is not None and (outcome.sent, outcome.status_code, outcome.tries) == (False, None, 2)
    [record] = service.ledger.deliveries("jt-hook0004")
    assert record.error == "could not connect (ConnectError)" and "127.0.0.1" not in record.error  # never the URL


def test_an_endpoint_that_never_answers_delays_no_tool_call(tmp_path):
    service = build_service(tmp_path / "home")
    change = _ended(service, "jt-hook0005")
    with webhook_receiver(hang=True) as hook:
        webhook = Webhook(WebhookSettings(url=hook.url, tries=1, timeout_s=60), lambda: service)
        webhook(change)  # the change feed's listener: it queues the notice and returns
        assert hook.taken.wait(30), "the worker never POSTed"
        # The POST hangs in the worker's thread; a tool call meanwhile is answered, the notice still unsent.
        result = call_tool(build_server(service), "inspect", {"job_id": "jt-hook0005"})
        assert not result.is_error and result.structured_content["status"] == "failed"
        [pending] = service.ledger.deliveries("jt-hook0005")
        assert pending.state == "sending" and not hook.released.is_set()
        hook.release()  # the endpoint closes the connection unanswered
        wait_for(lambda: service.ledger.deliveries("jt-hook0005")[0].state == "failed", 30, "the failure recorded")
    [record] = service.ledger.deliveries("jt-hook0005")
    assert (record.sent, record.status_code, record.tries) == (False, None, 1)


def test_only_the_events_asked_for_are_sent_and_slack_gets_text(tmp_path):
    service = build_service(tmp_path / "home")
    with webhook_receiver() as hook:
        settings = WebhookSettings(url=hook.url, events=frozenset({"ended"}), form="slack", backoff_s=0.01)
        webhook = Webhook(settings, lambda: service)
        webhook(JobChange("jt-hook0006", Change.ALERT, 1, "loss_spike"))  # not asked for: never queued
        webhook(JobChange("jt-hook0006", Change.CHECKPOINT, 1, "checkpoint-2"))  # never a notice
        webhook(_ended(service, "jt-hook0006"))
        wait_for(lambda: hook.answered, 30, "the ending's POST")
        [received] = hook.received
    text = json.loads(received.body)["text"]
    assert set(json.loads(received.body)) == {"text"} and SIGNATURE_HEADER not in received.headers
    assert text.startswith("jobtrail: jt-hook0006 ended (hub_error)\n*jt-hook0006*: failed"), text
    assert [d.notice for d in service.ledger.deliveries("jt-hook0006")] == ["ended:1"]


def test_settings_are_checked_at_start():
    assert webhook_settings({}) is None
    settings = webhook_settings(
        {"JOBTRAIL_WEBHOOK_URL": "https://hooks.example.com/x", "JOBTRAIL_WEBHOOK_EVENTS": "ended, held"}
    )
    assert settings is not None and settings.events == {"ended", "held"} and settings.form == "json"
    assert webhook_settings({"JOBTRAIL_WEBHOOK_URL": "http://h/x"}).events == {"ended", "alert", "held"}
    refused = {
        "not an http(s) URL": {"JOBTRAIL_WEBHOOK_URL": "hooks.example.com/x"},
        "the events are ended, alert and held": {
            "JOBTRAIL_WEBHOOK_URL": "https://h/x",
            "JOBTRAIL_WEBHOOK_EVENTS": "ended,finished",
        },
        "is not a format": {"JOBTRAIL_WEBHOOK_URL": "https://h/x", "JOBTRAIL_WEBHOOK_FORMAT": "teams"},
        "there is no webhook to send to": {"JOBTRAIL_WEBHOOK_SECRET": "s3cret-value"},
    }
    for said, environ in refused.items():
        with pytest.raises(InvalidRequestError, match=re.escape(said)) as caught:
            webhook_settings(environ)
        assert caught.value.fix and "s3cret-value" not in str(caught.value)
