"""bench collects outputs from a real stream: token ids from a server that sends them, text from one that does not."""

from __future__ import annotations

from pathlib import Path

from specguard.loadgen.prompts import synthetic_prompts
from specguard.loadgen.runner import BenchConfig, run_async, run_bench
from specguard.results.models import LoadShape, OutputRecord
from specguard.results.run_dir import RunDir, load_run
from specguard.results.store import read_jsonl

FAST = {"ttft_ms": 5, "interval_ms": 5, "chunks": 4, "tokens_pattern": [1, 2]}


def bench(server, out: Path, outputs: str) -> None:
    cfg = BenchConfig(
        base_url=server.base_url,
        model="scripted",
        prompts=synthetic_prompts("random", count=2),
        load=LoadShape(kind="concurrency", concurrency=1, num_requests=4),
        metrics_url=None,
        out_dir=out,
        outputs=outputs,
    )
    run_async(run_bench(cfg))


def test_token_ids_go_to_the_side_file_and_only_with_keep_into_requests(scripted, tmp_path: Path) -> None:
    server = scripted(**FAST, diverge_after_tokens=2, diverge_every=3)
    bench(server, tmp_path / "compare", "compare")
    outs = {o.seq: o for o in read_jsonl(tmp_path / "compare" / RunDir.OUTPUTS, OutputRecord)}
    records = load_run(tmp_path / "compare")[1]
    assert len(outs) == 4 and all(r.output_token_ids is None for r in records)
    for r in records:
        ids = outs[r.seq].token_ids
        assert ids is not None and len(ids) == r.output_tokens == 6 and outs[r.seq].text is None
        assert outs[r.seq].item == r.item
    # each prompt twice: equal ids, except where the server was scripted to diverge (its 3rd request, from token 2)
    by_item: dict[int, list[list[int]]] = {}
    for seq in sorted(outs):
        by_item.setdefault(outs[seq].item, []).append(outs[seq].token_ids or [])
    pairs = [v for v in by_item.values() if len(v) == 2]
    assert len(pairs) == 2 and sorted(a[:2] == b[:2] and a[2:] != b[2:] for a, b in pairs) == [False, True]
    bench(server, tmp_path / "keep", "keep")
    kept = load_run(tmp_path / "keep")[1]
    assert all(r.output_token_ids is not None and len(r.output_token_ids) == 6 for r in kept)


def test_a_server_that_sends_no_ids_leaves_the_text(scripted, tmp_path: Path) -> None:
    server = scripted(**FAST, token_ids=False)
    bench(server, tmp_path / "run", "compare")
    outs = read_jsonl(tmp_path / "run" / RunDir.OUTPUTS, OutputRecord)
    assert outs and all(o.token_ids is None and o.text and o.text.startswith(" w") for o in outs)
