from typing import Any

def build(data: Any, pos: int, end: int, count: int, base_offset: int, base_timestamp: int, max_timestamp: int,
          log_append_time: int, topic: str, partition: int, ranges: list[tuple[int, int, int]], i: int,
          key_de: Any, value_de: Any, record_type: Any, out: list[Any], offsets: list[int], /) -> int: ...
