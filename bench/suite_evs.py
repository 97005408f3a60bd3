"""Suite `evs`: a pruned video admitted, then its retention mask applied.

Qwen2.5-VL (tokens_per_second 2, second_per_grid_ts 1), 16 text tokens, a
64-frame video (32 temporal patches of 28 x 28 patches: 196 tokens per
patch, 6,272 unpruned), 64 text tokens. Pruning rates 0.5 and 0.75; the
mask keeps the first temporal patch whole and a random choice of the rest,
scattered (the worst case for our rows: many short runs of kept tokens).

Designs, each timed from the pruned prompt ids (a Python list, as vLLM
holds them) to the request's positions being ready:
- tracker: `PrunedPrompt` (one scan to rebuild the unpruned layout), admission
  with the mask still to come, then `set_retention_mask` (rows split
  around the dropped tokens);
- vLLM-like: vLLM 0.33's design re-stated in torch: admission writes the
  prompt's dense positions by the unpruned rule (our `prompt_positions` on
  the unpruned prompt, then the first N columns, which only flatters it),
  then its Qwen2.5-VL recompute once the mask is known: per-token relative
  (t, h, w) of the grid gathered by the mask, the video's start found from
  `vision_start`, the video and every later token rewritten;
- contract: vLLM's own call with our rule (`mrope_tracker.vllm.EvsRecompute`,
  what the plugin runs inside Model Runner V2): `PrunedPrompt`, the
  admission positions with the mask still to come, the identity channels
  written into the kept rows (`write_identity_columns`, where vLLM writes its
  position channels), then one `recompute_mrope_positions` for a one-shot
  prefill.
All three are checked to agree under ``semantics="vllm-0.33"`` (a one-video
prompt, where we reproduce vLLM), and the tracker's delta to agree under
both presets before anything is timed. Torch runs on one thread while they
are timed, as in the other suites that compare with it: our code runs on
one, and on a shared machine torch's second thread only adds waiting to the
vLLM-like design's time (about 3x here).
"""

from __future__ import annotations

import numpy as np
import torch

from mrope_tracker import MRopeConfig, PositionTracker, prompt_positions
from mrope_tracker.evs import PendingPrune, PrunedPrompt
from mrope_tracker.vllm import EvsRecompute, write_identity_columns

from .timing import measure, medians_us, ratio, torch_threads

T, H, W, MERGE = 32, 28, 28, 2
RATES = (0.5, 0.75)
DESIGNS = ("tracker", "vLLM-like", "contract")
HIDDEN = 8  # embedding width: small, so copying rows does not hide the position work


def _case(config: MRopeConfig, q: float, seed: int = 0):
    """(pruned ids, unpruned ids, mask) of the workload at pruning rate q."""
    size = (H // MERGE) * (W // MERGE)
    total = T * size
    kept = max(size, int(total * (1 - q)))
    rng = np.random.default_rng(seed)
    mask = np.zeros(total, bool)
    mask[:size] = True
    mask[size + rng.choice(total - size, kept - size, replace=False)] = True
    head = [1000 + i for i in range(16)] + [config.vision_start_token_id]
    tail = [config.vision_end_token_id] + [2000 + i for i in range(64)]
    pruned = head + [config.video_token_id] * kept + tail
    full = head + [config.video_token_id] * total + tail
    return pruned, full, mask


def _vllm_like(config: MRopeConfig, ids: list[int], full: list[int], mask: np.ndarray, table: torch.Tensor):
    """vLLM 0.33's admission then recompute, in torch; returns (positions view, delta)."""
    n = len(ids)
    positions, _ = prompt_positions(config, full, video_grid_thw=[[T, H, W]], second_per_grid_ts=[1.0])
    table[:, :n] = torch.from_numpy(positions[:, :n]) if isinstance(positions, np.ndarray) else positions[:, :n]
    # recompute, as its model class does once the encoder has pruned the video
    h, w = H // MERGE, W // MERGE
    scale = int(config.tokens_per_second) * 1  # second_per_grid_ts truncated to an integer
    t_index = torch.arange(T).view(-1, 1).expand(-1, h * w).mul(scale).flatten()
    h_index = torch.arange(h).view(1, -1, 1).expand(T, -1, w).flatten()
    w_index = torch.arange(w).view(1, 1, -1).expand(T, h, -1).flatten()
    keep = torch.from_numpy(mask)
    relative = torch.stack([t_index, h_index, w_index])[:, keep]
    input_ids = torch.tensor(ids)
    start = int((input_ids == config.vision_start_token_id).nonzero()[0]) + 1
    base = int(table[0, start - 1]) + 1
    kept = relative.shape[1]
    table[:, start : start + kept] = relative + base
    after = n - start - kept
    table[:, start + kept : n] = (base + w + torch.arange(after)).view(1, -1)
    delta = int(table[:, :n].max()) + 1 - n
    return table[:, :n], delta


def run(quick: bool, progress) -> dict:
    rows = []
    for q in RATES:
        config = MRopeConfig(family="qwen2_5_vl", model_type="qwen2_5_vl", tokens_per_second=2, semantics="vllm-0.33")
        ids, full, mask = _case(config, q)
        tracker = PositionTracker(config, max_num_reqs=2, max_num_batched_tokens=len(ids))
        table_ = torch.zeros((3, len(full)), dtype=torch.int64)

        def ours(ids=ids, mask=mask, tracker=tracker, config=config):
            prompt = PrunedPrompt(config, ids, video_grid_thw=[[T, H, W]], second_per_grid_ts=[1.0])
            tracker.add_request_pruned("r", prompt)
            tracker.set_retention_mask("r", 0, mask)
            tracker.remove_request("r")

        def vllm_like(ids=ids, full=full, mask=mask, config=config, table_=table_):
            return _vllm_like(config, ids, full, mask, table_)

        start = ids.index(config.vision_start_token_id) + 1
        rows_ = torch.zeros(int(mask.sum()), HIDDEN + 4)

        def contract(ids=ids, mask=mask, config=config, start=start, rows_=rows_):
            prompt = PrunedPrompt(config, ids, video_grid_thw=[[T, H, W]], second_per_grid_ts=[1.0])
            admitted = torch.from_numpy(PendingPrune(prompt).layout().positions())
            write_identity_columns(rows_, mask, family="qwen2_5_vl")
            recompute = EvsRecompute(prompt, [(start, rows_.shape[0])])
            _, positions, delta = recompute.recompute_mrope_positions(ids, [rows_], admitted, 0)
            return positions, delta

        # agreement before timing: positions and delta under vLLM's preset
        prompt = PrunedPrompt(config, ids, video_grid_thw=[[T, H, W]], second_per_grid_ts=[1.0])
        tracker.add_request_pruned("check", prompt, retention_masks=[mask])
        got = tracker.prepare(["check"], [len(ids)]).numpy()
        expected, delta = vllm_like()
        if not np.array_equal(got, expected.numpy()) or tracker.mrope_position_delta("check") != delta:
            raise AssertionError("evs: the tracker and the vLLM-like re-statement disagree under vllm-0.33")
        positions, contract_delta = contract()
        if not np.array_equal(positions.numpy(), expected.numpy()) or contract_delta != delta:
            raise AssertionError("evs: EvsRecompute and the vLLM-like re-statement disagree under vllm-0.33")
        tracker.remove_request("check")
        layout = prompt.layout([mask])
        progress(f"evs: pruning rate {q}")
        with torch_threads(1):  # as our code runs on one thread (torch's spare threads only wait on a shared machine)
            samples = measure(
                {"tracker": ours, "vLLM-like": vllm_like, "contract": contract}, rounds=5 if quick else 15
            )
        us = medians_us(samples)
        rows.append(
            {
                "pruning_rate": q,
                "prompt_tokens": len(ids),
                "unpruned_tokens": len(full),
                "layout_rows": layout.num_rows,
                "tracker_bytes": layout.num_rows * (layout.rows.itemsize * layout.rows.shape[1] + 8),
                "vllm_table_bytes": 3 * 4 * len(ids),
                "tracker": us["tracker"],
                "vLLM-like": us["vLLM-like"],
                "speedup": ratio(samples, "vLLM-like", "tracker"),
                "contract": us["contract"],
                "contract_speedup": ratio(samples, "vLLM-like", "contract"),
            }
        )
    return {"rows": rows}


def tables(result: dict) -> str:
    from .report import table

    def us(x: float) -> str:
        return f"{x:,.0f} us" if x < 1000 else f"{x / 1000:,.2f} ms"

    rows = [
        [
            f"{r['pruning_rate']}",
            f"{r['prompt_tokens']:,} of {r['unpruned_tokens']:,}",
            us(r["tracker"]),
            us(r["vLLM-like"]),
            f"{r['speedup']['median']:.2f}x ({r['speedup']['min']:.2f}-{r['speedup']['max']:.2f})",
            us(r["contract"]),
            f"{r['contract_speedup']['median']:.2f}x",
            f"{r['layout_rows']:,} rows, {r['tracker_bytes']:,} B",
            f"{r['vllm_table_bytes']:,} B",
        ]
        for r in result["rows"]
    ]
    return table(
        [
            "pruning rate",
            "tokens kept",
            "tracker",
            "vLLM-like",
            "speedup",
            "EvsRecompute (vLLM's call)",
            "its speedup",
            "our state",
            "vLLM's int32 rows",
        ],
        rows,
    )
