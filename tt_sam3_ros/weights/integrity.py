"""Integrity checks that run before anything big is read: a truncated download fails with the reason.

Nothing here imports torch: the checks read only headers and file sizes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tt_sam3_ros.weights.errors import WeightsError, corrupt

SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024


def safetensors_header(path: Path) -> dict[str, Any]:
    """The tensor table of a .safetensors file, checked against the file's size.

    The format is an 8-byte little-endian header length, a JSON header giving every
    tensor's byte range, then the data; a download cut short is shorter than the ranges say.
    """
    size = path.stat().st_size
    with path.open("rb") as stream:
        prefix = stream.read(8)
        if len(prefix) < 8:
            raise corrupt(path, f"the file is {size} bytes, too short for a safetensors header")
        header_length = int.from_bytes(prefix, "little")
        if header_length > min(size - 8, SAFETENSORS_HEADER_LIMIT):
            raise corrupt(path, f"its safetensors header claims {header_length} bytes in a {size}-byte file")
        try:
            header = json.loads(stream.read(header_length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise corrupt(path, f"its safetensors header is not valid JSON ({error})") from error
    if not isinstance(header, dict):
        raise corrupt(path, "its safetensors header is not a table of tensors")
    tensors = {name: info for name, info in header.items() if name != "__metadata__"}
    try:
        data_end = max((int(info["data_offsets"][1]) for info in tensors.values()), default=0)
    except (KeyError, TypeError, IndexError, ValueError) as error:
        raise corrupt(path, f"its safetensors header lacks tensor offsets ({error})") from error
    expected = 8 + header_length + data_end
    if size != expected:
        raise corrupt(path, f"the file is {size:,} bytes but its header describes {expected:,} bytes")
    return tensors


def check_transformers_folder(folder: Path) -> None:
    """config.json parses, and every weight file (or shard) is present and whole."""
    try:
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise corrupt(folder / "config.json", f"it is not valid JSON ({error})") from error
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        safetensors_header(folder / "model.safetensors")
        return
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, AttributeError) as error:
        raise corrupt(index, f"it is not a valid shard index ({error})") from error
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise WeightsError(
            f"{folder} is missing weight shards listed in model.safetensors.index.json: "
            f"{', '.join(missing)}. Download them again (`hf download` resumes) or copy the whole folder."
        )
    for name in shards:
        safetensors_header(folder / name)
