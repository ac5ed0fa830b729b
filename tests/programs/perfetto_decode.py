#!/usr/bin/env python3
"""Reads a Perfetto trace with Perfetto's own schema (perfetto_trace_pb2 of Perfetto's Python
package, generated from perfetto_trace.proto), not with the exporter's types, and prints what
the tests check as one JSON object: the tracks, the track events, the clock snapshots, and
the fields Perfetto's schema does not know (there must be none).

usage: perfetto_decode.py TRACE_FILE
"""
import json
import sys

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def unknown(msg, where, out):
    """Appends to `out` every field of `msg` (and of its sub-messages) the schema lacks."""
    for field in unknown_fields.UnknownFieldSet(msg):
        out.append(f"{where}.{field.field_number}")
    for desc, value in msg.ListFields():
        if desc.type != desc.TYPE_MESSAGE:
            continue
        if hasattr(desc, "is_repeated"):
            repeated = desc.is_repeated
        else:
            repeated = desc.label == desc.LABEL_REPEATED
        items = value if repeated else [value]
        for item in items:
            unknown(item, f"{where}.{desc.name}", out)


def annotation_value(a):
    kind = a.WhichOneof("value")
    return getattr(a, kind) if kind else None


def optional(msg, field):
    return getattr(msg, field) if msg.HasField(field) else None


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    out = {"packets": len(trace.packet), "tracks": [], "events": [], "clock_snapshots": [],
           "unknown_fields": [], "first_packet": None}
    unknown(trace, "Trace", out["unknown_fields"])
    for i, p in enumerate(trace.packet):
        if i == 0:
            out["first_packet"] = {
                "sequence_flags": p.sequence_flags,
                "has_clock_snapshot": p.HasField("clock_snapshot"),
            }
        data = p.WhichOneof("data")
        if data == "clock_snapshot":
            out["clock_snapshots"].append({
                "clocks": [[c.clock_id, c.timestamp] for c in p.clock_snapshot.clocks],
                "primary_trace_clock": p.clock_snapshot.primary_trace_clock,
            })
        elif data == "track_descriptor":
            d = p.track_descriptor
            track = {"uuid": d.uuid, "parent_uuid": optional(d, "parent_uuid"),
                     "name": optional(d, "name"), "process": None, "thread": None}
            if d.HasField("process"):
                track["process"] = {"pid": d.process.pid, "process_name": d.process.process_name,
                                    "cmdline": list(d.process.cmdline),
                                    "labels": list(d.process.process_labels)}
            if d.HasField("thread"):
                track["thread"] = {"pid": d.thread.pid, "tid": d.thread.tid,
                                   "thread_name": d.thread.thread_name}
            out["tracks"].append(track)
        elif data == "track_event":
            e = p.track_event
            out["events"].append({
                "ts": p.timestamp,
                "clock_id": optional(p, "timestamp_clock_id"),
                "sequence": p.trusted_packet_sequence_id,
                "type": pb.TrackEvent.Type.Name(e.type),
                "track_uuid": e.track_uuid,
                "name": optional(e, "name"),
                "categories": list(e.categories),
                "args": {a.name: annotation_value(a) for a in e.debug_annotations},
                "flow_ids": list(e.flow_ids),
                "terminating_flow_ids": list(e.terminating_flow_ids),
            })
        else:
            out["unknown_fields"].append(f"packet {i}: data {data}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
