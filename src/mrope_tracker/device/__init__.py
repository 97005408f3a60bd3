"""The device path for vLLM's Model Runner V2: `RopeState`, its rows and its Triton kernel.

`rope_state` (MRV2's state contract), `pool` (slot records and the growing
row pool), `rows` (layout rows cast for the device), `triton_step` (the one
kernel a step; the only module that imports triton, and only when a state is
built), `staging` (staged device writes), `overrides` (vLLM's EVS recompute),
`checks` (argument checks), `evs_rows` (EVS by our rule, composed on
`RopeState`), `factory` (`get_rope_state` with vLLM's signature).

May import: `core`, `evs`, `tracker`, `kernels`, `families`.
"""
