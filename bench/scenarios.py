"""The scheduler scenarios: streams of requests (prompts from workloads.py,
output lengths, prefix-cache hits) and the engine limits they run under."""

from __future__ import annotations

import attrs
import numpy as np

from mrope_tracker import MRopeConfig

from .workloads import Prompt, PromptBuilder, qwen2_5_omni, qwen2_5_vl, qwen3_vl


@attrs.frozen(eq=False)
class RequestSpec:
    req_id: str
    prompt: Prompt
    output_len: int
    prefix_hit: int  # prompt tokens found in the prefix cache at admission


@attrs.frozen(eq=False)
class Scenario:
    key: str
    title: str
    config: MRopeConfig
    requests: list[RequestSpec]
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int


def scenarios(quick: bool = False) -> list[Scenario]:
    """The scheduler scenarios (a-d: issue 4; e: Qwen3-VL). `quick` shrinks request counts."""
    rng = np.random.default_rng(0)
    out = []

    # a. the seed's end-to-end workload: 200 text tokens + one 512x512 image
    #    (324 tokens) in, 200 tokens out; 1024 requests, 128 seqs, 8192 tokens.
    vl = qwen2_5_vl()
    n = 256 if quick else 1024
    reqs = []
    for i in range(n):
        p = PromptBuilder(vl).text(100).image(36, 36).text(100).build()
        reqs.append(RequestSpec(f"a{i}", p, 200, 0))
    out.append(Scenario("a", "seed e2e: 200 text + 1 image (324) in, 200 out", vl, reqs, 128, 8192, 8192))

    # b. long videos (200 frames, 32,400 tokens) with prefix-cache hits: half
    #    the requests ask about a video already cached (hit = the video).
    n = 16 if quick else 64
    reqs = []
    for i in range(n):
        p = PromptBuilder(vl).text(50).video(200, 18, 36).text(int(rng.integers(20, 200))).build()
        hit = (p.num_tokens - 250) // 16 * 16 if i % 2 else 0
        hit = max(0, min(hit, 50 + 32_400 + 2))
        reqs.append(RequestSpec(f"b{i}", p, 100, hit))
    out.append(Scenario("b", "long videos, 200 frames (32,400 tokens), half cached", vl, reqs, 32, 8192, 40960))

    # c. Omni: audio clips and 20-second videos with their audio interleaved.
    omni = qwen2_5_omni()
    n = 64 if quick else 256
    reqs = []
    for i in range(n):
        b = PromptBuilder(omni).text(30)
        if i % 2:
            b.video_with_audio(10, 28, 28, 2000)  # 10 x 14x14 = 1,960 video + 500 audio tokens
        else:
            b.audio_clip(1200).text(10).image(28, 28)
        reqs.append(RequestSpec(f"c{i}", b.text(30).build(), 150, 0))
    out.append(Scenario("c", "Omni: audio, images and video with interleaved audio", omni, reqs, 64, 8192, 8192))

    # d. many short, decode-heavy requests.
    n = 512 if quick else 2048
    reqs = []
    for i in range(n):
        p = PromptBuilder(vl).text(int(rng.integers(20, 60))).image(14, 14).text(10).build()
        reqs.append(RequestSpec(f"d{i}", p, int(rng.integers(300, 700)), 0))
    out.append(Scenario("d", "short prompts, long outputs (decode-heavy)", vl, reqs, 256, 8192, 2048))

    # e. Qwen3-VL: 16-frame videos (every frame its own block after its
    #    timestamp text) and pairs of images.
    q3 = qwen3_vl()
    n = 64 if quick else 256
    reqs = []
    for i in range(n):
        b = PromptBuilder(q3).text(int(rng.integers(20, 80)))
        if i % 2:
            b.video(16, 16, 16)  # 16 x 64 tokens, each frame after 4 timestamp tokens
        else:
            b.image(24, 24).text(10).image(24, 24)
        reqs.append(RequestSpec(f"e{i}", b.text(40).build(), 150, 0))
    out.append(Scenario("e", "Qwen3-VL: 16-frame videos with timestamps, image pairs", q3, reqs, 64, 8192, 8192))
    return out
