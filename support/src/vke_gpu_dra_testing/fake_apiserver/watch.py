"""Watches of ResourceSlices: the initial events (or a watch-list's, ended by a bookmark), then every
change after the resourceVersion asked for, as chunks of one HTTP response; 410 Gone once compacted."""

from __future__ import annotations

import copy
import io
import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from .errors import ApiError
from .list_options import matches, parse_field_selector
from .slices import SliceStore

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def chunk(out: io.BufferedIOBase, event: dict[str, Any]) -> None:
    """One event of a watch stream, as one HTTP chunk."""
    data = json.dumps(event).encode() + b"\n"
    out.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    out.flush()


def initial_events(api: SliceStore, selector: dict[str, str], *, bookmarks: bool) -> list[dict[str, Any]]:
    """Watch-list: the current objects, then the bookmark that ends the initial events."""
    events: list[dict[str, Any]] = [
        {"type": "ADDED", "object": copy.deepcopy(s)}
        for _, s in sorted(api.slices.items())
        if matches(s, selector)
    ]
    if bookmarks:
        metadata = {"resourceVersion": str(api.current_rv), "annotations": {INITIAL_EVENTS_END: "true"}}
        events.append(
            {
                "type": "BOOKMARK",
                "object": {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": metadata,
                },
            }
        )
    return events


def watch_start(
    api: SliceStore, rv_param: str, selector: dict[str, str], *, send_initial: bool, bookmarks: bool
) -> tuple[list[dict[str, Any]], int | None]:
    """The first events of a watch and the resourceVersion it continues from (None: it ends)."""
    with api.cond:
        if send_initial:
            return initial_events(api, selector, bookmarks=bookmarks), api.current_rv
        if rv_param not in ("", "0") and int(rv_param) < api.compacted_rv:
            expired = ApiError(410, "Expired", f"too old resource version: {rv_param} ({api.compacted_rv})")
            return [{"type": "ERROR", "object": expired.status()}], None
        if rv_param in ("", "0"):
            return initial_events(api, selector, bookmarks=False), api.current_rv
        return [], int(rv_param)


def serve_watch(handler: BaseHTTPRequestHandler, api: SliceStore, query: dict[str, str]) -> None:
    """Answer a watch of ResourceSlices: a chunked stream of events until its timeout, a 410 Gone or the
    server's stop."""
    selector = parse_field_selector(query.get("fieldSelector", ""))
    deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
    rv_param = query.get("resourceVersion", "")
    send_initial = query.get("sendInitialEvents") == "true"
    bookmarks = query.get("allowWatchBookmarks") == "true"
    if not api.pass_watch_gate():
        return
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    opened = False
    with api.cond:
        compactions = api.compactions
    try:
        pending, last = watch_start(api, rv_param, selector, send_initial=send_initial, bookmarks=bookmarks)
        while True:
            for event in pending:
                chunk(handler.wfile, event)
            if last is None:
                break
            if not opened:
                opened = True
                with api.cond:
                    api.watching += 1
                    api.cond.notify_all()
            with api.cond:
                while not api.closing and not any(rv > last for rv, _, _ in api.events):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or api.compacted_rv > last or api.compactions != compactions:
                        break
                    api.cond.wait(min(remaining, 0.5))
                if api.closing or time.monotonic() >= deadline:
                    break
                expired_now = api.compacted_rv > last or api.compactions != compactions
                if expired_now and not any(rv > last for rv, _, _ in api.events):
                    expired = ApiError(410, "Expired", "too old resource version")
                    pending, last = [{"type": "ERROR", "object": expired.status()}], None
                    continue
                new = [(rv, t, o) for rv, t, o in api.events if rv > last]
                pending = [{"type": t, "object": copy.deepcopy(o)} for _, t, o in new if matches(o, selector)]
                last = new[-1][0]
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError, OSError):
        return
    finally:
        if opened:
            with api.cond:
                api.watching -= 1
                api.cond.notify_all()
