"""The host side of a debug build's device record (``NUMBA_WS_DEBUG_BARRIERS=1``): its
layout, the wait kinds, and decoding it into a message. The device side, and what the
record means, is :mod:`numba_ws.codegen.debug`; this module needs no numba-cuda (the
launcher reads records of modules loaded from the disk cache).
"""
import json
import struct

RECORD_SYMBOL = "__ws_debug_record"
INFO_SYMBOL = "__ws_debug_info"
RECORD_BYTES = 64
#: Byte layout of the record (little-endian): field name -> (offset, struct code).
RECORD = {"status": (0, "I"), "timeouts": (4, "I"), "wait": (8, "I"), "channel": (12, "i"),
          "slot": (16, "I"), "phase": (20, "I"), "parity": (24, "I"),
          "warp_group": (28, "I"), "thread": (32, "I"), "cta_x": (36, "I"),
          "cta_y": (40, "I"), "cta_z": (44, "I"), "cycles": (48, "Q"),
          "timeout": (56, "Q")}
#: Wait kinds (record.wait) and what each waited for.
WAITS = {1: ("producer acquire", "empty barrier: thread 0 of the producer waits until every "
                                 "consumer released the slot"),
         2: ("consumer wait", "full barrier: the consumer waits for the slot's data"),
         3: ("cp.async producer acquire", "empty barrier: the producer threads wait until "
                                          "every consumer released the slot"),
         4: ("ping-pong turn wait", "turn barrier: the consumer group waits for its turn")}
PRODUCER_ACQUIRE, CONSUMER_WAIT, CP_ASYNC_ACQUIRE, TURN_WAIT = 1, 2, 3, 4


def decode_record(raw):
    """The record's fields (a dict) from its 64 bytes, or None when no wait timed out."""
    raw = bytes(raw)
    if len(raw) != RECORD_BYTES:
        raise ValueError(f"a debug record has {RECORD_BYTES} bytes, got {len(raw)}")
    fields = {n: struct.unpack_from("<" + code, raw, off)[0] for n, (off, code) in RECORD.items()}
    return fields if fields["status"] else None


def decode_info(raw):
    """The info JSON (dict) from the bytes of ``__ws_debug_info``; {} when unreadable."""
    try:
        return json.loads(bytes(raw).split(b"\0", 1)[0].decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {}


def describe_timeout(fields, info, entry):
    """One message naming the kernel, the wait, channel, slot and phase of a record."""
    what, why = WAITS.get(fields["wait"], (f"wait kind {fields['wait']}", "?"))
    kernel = info.get("kernel") or entry
    channels = info.get("channels") or []
    if fields["wait"] == TURN_WAIT:
        where = f"consumer group {fields['slot']}'s turn (phase {fields['phase']})"
    else:
        ch = fields["channel"]
        text = channels[ch] if 0 <= ch < len(channels) else f"channel {ch}"
        where = f"{text}; slot {fields['slot']}, phase {fields['phase']}"
    dropped = info.get("dropped_release")
    hint = (f" (NUMBA_WS_DEBUG_DROP_RELEASE dropped channel {dropped}'s releases)"
            if dropped is not None else "")
    return (f"kernel {kernel} ({entry}): {what} timed out after {fields['cycles']} SM cycles "
            f"(NUMBA_WS_DEBUG_BARRIERS timeout {fields['timeout']}): {why}; {where}, waiting "
            f"for parity {fields['parity']}; warp group {fields['warp_group']}, thread "
            f"{fields['thread']} of CTA ({fields['cta_x']}, {fields['cta_y']}, "
            f"{fields['cta_z']}); {fields['timeouts']} wait(s) timed out in this launch"
            f"{hint}. The waiting threads exited: the launch's outputs are incomplete.")
