"""Integer codes shared by the kernels and their Python wrappers.

A prompt's *layout* is a table of segments (rows), one int64 row per segment,
in token order, covering the prompt without gaps (see docs/design.md):

    LINEAR  token n of the row sits at base + n on all three rows
            (text, audio, the audio part of an Omni interleave chunk)
    CONST   every token of the row sits at base (Omni's shared bos/eos pair)
    GRID    tokens grid_offset ... grid_offset + len - 1 of a (t', h', w')
            vision grid: (base + tau(f), base + i, base + j), spec §1.3

tau(f) = f, or trunc((float32(f) * sp) * r) in float32 when the row is scaled;
the per-row float32 pair (sp, r) lives in a parallel float32 array.

Module-level ints are compile-time constants for numba.
"""

# --- layout row columns (int64) -------------------------------------------
COL_TOK_START = 0  # first prompt token index of the row
COL_TOK_LEN = 1  # number of tokens in the row
COL_KIND = 2
COL_BASE = 3
COL_GRID_OFFSET = 4  # GRID: index of the row's first token inside the grid
COL_T = 5  # GRID: t' (LLM grid, after merging)
COL_H = 6  # GRID: h'
COL_W = 7  # GRID: w'
COL_SCALED = 8  # GRID: 1 when tau(f) is scaled by (sp, r)
NUM_COLS = 9

# float32 columns of the parallel scale array
SCALE_SP = 0  # second_per_grid_ts of the video
SCALE_R = 1  # tokens_per_second / position_id_per_seconds
NUM_SCALE_COLS = 2

KIND_LINEAR = 0
KIND_CONST = 1
KIND_GRID = 2

# --- packed config (MRopeConfig.kernel_params, float64) ----------------------
# One float64 array carries the ids (exact below 2**53) and the float32 time
# scale (exact in float64), so a kernel call passes one argument for it.
P_FAMILY = 0
P_MERGE = 1
P_IMAGE = 2
P_VIDEO = 3
P_VISION_START = 4
P_VISION_END = 5
P_AUDIO = 6
P_AUDIO_START = 7
P_AUDIO_END = 8
P_CHUNK = 9  # Omni interleave chunk in positions; 0 for VL families
P_SCALED = 10  # 1 when videos are scaled by tokens_per_second
P_SCALE_R = 11  # tokens_per_second rounded to float32 (1.0 when unscaled)
NUM_PARAMS = 12

FAMILY_QWEN2_VL = 0
FAMILY_QWEN2_5_VL = 1
FAMILY_QWEN2_5_OMNI = 2

# --- modality codes used by the range-based builder -------------------------
MOD_IMAGE = 0
MOD_VIDEO = 1
MOD_AUDIO = 2

# --- error codes returned by the builder kernels ----------------------------
# A kernel returns (code, a, b, c); the wrapper turns them into a message
# (see ..inputs.layout_error). Codes are never raised inside nopython code.
OK = 0
ERR_PLACEHOLDER_SHORT = 2  # a: modality, b: item index, c: token index of the mismatch
ERR_CUT_OFF = 3  # a: modality, b: item index, c: tokens still missing
ERR_EXTRA_ITEM = 4  # a: modality, b: token index of the unmatched placeholder
ERR_MISSING_ITEMS = 5  # a: modality, b: items consumed, c: items given
ERR_AV_NOT_IN_BLOCK = 6  # a: video index, b: token index
ERR_AV_NO_AUDIO = 7  # a: video index
ERR_AV_BAD_TOKEN = 8  # a: video index, b: token index, c: expected token id
ERR_AV_CUT_OFF = 9  # a: video index, b: tokens still missing
ERR_RANGE_OVERLAP = 10  # a: modality, b: item index, c: previous end
ERR_RANGE_OUT = 11  # a: modality, b: item index, c: range end
ERR_RANGE_LENGTH = 12  # a: modality, b: item index, c: expected length
ERR_AV_RANGE_CONTEXT = 13  # a: video index, b: offset (needs 2 tokens before and after)
ERR_GRID_DIM = 14  # a: modality, b: item index, c: column (0 t, 1 h, 2 w) not positive
ERR_GRID_MERGE = 15  # a: modality, b: item index, c: column not divisible by the merge size
ERR_IMAGE_T = 16  # a: image index, b: t
ERR_SP_VALUE = 17  # a: video index (NaN, infinite or negative)
ERR_TAU_OVERFLOW = 18  # a: video index (temporal index past 2**31)
ERR_AUDIO_SHORT = 19  # a: audio index, b: mel frames (fewer than one audio token)
ERR_RANGE_NEGATIVE = 20  # a: modality, b: item index, c: bad value
