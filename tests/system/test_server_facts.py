"""What a server says about itself, read once (``inspect_server``), against the scripted server."""

from __future__ import annotations

from specguard.scripted.server import SERVED_NAME
from specguard.server_metrics.server_facts import inspect_server
from specguard.vllm.process import free_port


def test_a_server_says_its_version_models_and_metrics(scripted) -> None:
    facts = inspect_server(scripted().base_url + "/v1")
    assert facts.reachable and facts.errors == []
    assert facts.version == "scripted"
    assert facts.served_names == [SERVED_NAME]
    assert facts.metrics_ok and facts.kv_cache_usage is not None


def test_without_metrics_bench_asks_only_for_the_version_and_models(scripted) -> None:
    facts = inspect_server(scripted().base_url, read_metrics=False)
    assert facts.reachable and facts.errors == []
    assert (facts.version, facts.served_names) == ("scripted", [SERVED_NAME])
    assert not facts.metrics_ok and facts.cache_config is None


def test_a_server_that_does_not_answer_has_said_no_model_names() -> None:
    # None, not []: "serves nothing" would refuse every --model, "did not say" leaves the check to the requests.
    facts = inspect_server(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    assert not facts.reachable and facts.errors
    assert facts.served_names is None
    assert facts.models == [] and "_models_read" not in facts.model_dump()  # the record is as before
