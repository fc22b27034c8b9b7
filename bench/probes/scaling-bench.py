#!/usr/bin/env python3
# SPDX-License-Identifier: MPL-2.0
"""Measures rscudaipcsrc feeding GStreamer's network elements (docs/scaling.md).

Each configuration runs three processes: a producer
(``videotestsrc ! rscudaipcsink``), a sender (``rscudaipcsrc ! ... ! udpsink`` or
``srtsink``) and, for the network paths, a receiver on 127.0.0.1
(``udpsrc``/``srtsrc ! ... ! fakesink``). Every process is this script run
again with ``--role``: it plays one pipeline and reports frames, timing and
its own CPU time. Prints a Markdown table.

    GST_PLUGIN_PATH=target/release /usr/bin/python3 bench/probes/scaling-bench.py \\
        [--size 640x360] [--frames 600] [--paced-frames 300] [--only NAME] [--fanout]

``--fanout`` measures a local reader next to an H.264/RTP sender that reads
every frame or only the latest.

Needs python3-gi; x264enc comes from gstreamer1.0-plugins-ugly (the H.264
rows are left out without it), srtsink/srtsrc and openh264dec from
gstreamer1.0-plugins-bad.
"""

import argparse
import os
import random
import resource
import subprocess
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

RTP_RAW = ("application/x-rtp,media=video,clock-rate=90000,encoding-name=RAW,"
           "sampling=RGB,depth=(string)8,width=(string){w},height=(string){h},"
           "colorimetry=(string)SMPTE240M,payload=96")
RTP_JPEG = "application/x-rtp,media=video,clock-rate=90000,encoding-name=JPEG,payload=26"
RTP_H264 = "application/x-rtp,media=video,clock-rate=90000,encoding-name=H264,payload=96"
# RTP JPEG carries 4:2:0 or 4:2:2 only, and openh264dec decodes 4:2:0 only
# (and fails on rtph264pay config-interval=-1 streams: 1 works). SRT carries
# 1316-byte messages: mpegtsmux alignment=7 makes buffers of that size.
I420 = "videoconvert ! video/x-raw,format=I420"
X264 = "x264enc tune=zerolatency speed-preset=ultrafast bitrate=4000 key-int-max=30"


def configurations():
    """(name, sender after rscudaipcsrc, receiver or None, elements needed)."""
    return [
        ("local: rscudaipcsrc ! fakesink",
         "fakesink name=sink sync=false", None, []),
        ("local: rscudaipcsrc ! videoconvert (I420) ! fakesink",
         I420 + " ! fakesink name=sink sync=false", None, []),
        ("RTP raw video over UDP",
         "rtpvrawpay ! udpsink host=127.0.0.1 port={port} sync=false",
         "udpsrc port={port} buffer-size=33554432 caps=\"" + RTP_RAW + "\" "
         "! rtpvrawdepay ! fakesink name=sink sync=false",
         ["rtpvrawpay"]),
        ("JPEG over RTP/UDP",
         I420 + " ! jpegenc quality=85 ! rtpjpegpay "
         "! udpsink host=127.0.0.1 port={port} sync=false",
         "udpsrc port={port} buffer-size=33554432 caps=\"" + RTP_JPEG + "\" "
         "! rtpjpegdepay ! jpegdec ! fakesink name=sink sync=false",
         ["jpegenc", "rtpjpegpay", "jpegdec"]),
        ("H.264 (x264enc) over RTP/UDP",
         I420 + " ! " + X264 + " ! rtph264pay config-interval=1 "
         "! udpsink host=127.0.0.1 port={port} sync=false",
         "udpsrc port={port} buffer-size=33554432 caps=\"" + RTP_H264 + "\" "
         "! rtph264depay ! h264parse ! openh264dec ! fakesink name=sink sync=false",
         ["x264enc", "rtph264pay", "openh264dec"]),
        ("H.264 (openh264enc) over RTP/UDP",
         I420 + " ! openh264enc bitrate=4000000 gop-size=30 ! rtph264pay config-interval=1 "
         "! udpsink host=127.0.0.1 port={port} sync=false",
         "udpsrc port={port} buffer-size=33554432 caps=\"" + RTP_H264 + "\" "
         "! rtph264depay ! h264parse ! openh264dec ! fakesink name=sink sync=false",
         ["openh264enc", "rtph264pay", "openh264dec"]),
        ("H.264 (x264enc) in MPEG-TS over SRT",
         I420 + " ! " + X264 + " ! h264parse ! mpegtsmux "
         "alignment=7 ! srtsink uri=srt://127.0.0.1:{port} latency=100 sync=false",
         "srtsrc uri=srt://:{port} latency=100 "
         "! tsdemux ! h264parse ! openh264dec ! fakesink name=sink sync=false",
         ["x264enc", "mpegtsmux", "srtsink", "openh264dec"]),
    ]


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def element_frames(pipeline):
    """Frames seen so far: the fakesink's rendered count, else rscudaipcsrc's."""
    sink = pipeline.get_by_name("sink")
    if sink is not None:
        return sink.get_property("stats").get_value("rendered")
    src = pipeline.get_by_name("src")
    if src is not None:
        return src.get_property("stats").get_value("frames")
    return 0


def run_role(description, idle):
    """Plays one pipeline until EOS, an error, or `idle` s without a frame."""
    Gst.init(None)
    pipeline = Gst.parse_launch(description)
    bus = pipeline.get_bus()
    cpu0, wall0 = cpu_seconds(), time.monotonic()
    pipeline.set_state(Gst.State.PLAYING)
    frames, first, last, error = 0, None, None, None
    while True:
        msg = bus.timed_pop_filtered(10 * Gst.MSECOND,
                                     Gst.MessageType.EOS | Gst.MessageType.ERROR)
        now = time.monotonic()
        count = element_frames(pipeline)
        if count != frames:
            frames = count
            first = first or now
            last = now
        if msg is not None:
            if msg.type == Gst.MessageType.ERROR:
                err, debug = msg.parse_error()
                error = err.message
            break
        if last is not None and now - last > idle:
            break
        if first is None and now - wall0 > 30:
            error = "no frame within 30 s"
            break
    cpu = cpu_seconds() - cpu0
    sent = None
    src = pipeline.get_by_name("src")
    if src is not None:
        sent = src.get_property("stats").get_value("frames")
    pipeline.set_state(Gst.State.NULL)
    active = (last - first) if first is not None and last > first else 0.0
    print(f"RESULT frames={frames} sent={sent} active={active:.4f} "
          f"cpu={cpu:.4f} wall={time.monotonic() - wall0:.4f}", flush=True)
    if error:
        print(f"ERROR {error}", flush=True)
        return 1
    return 0


def spawn(description, idle=1.0):
    return subprocess.Popen(
        [sys.executable, __file__, "--role", description, "--idle", str(idle)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(process):
    out, err = process.communicate(timeout=300)
    fields = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        if line.startswith("ERROR "):
            fields["error"] = line[6:]
    if not fields:
        fields["error"] = (err.strip().splitlines() or ["no result"])[-1]
    return fields


def measure(name, sender, receiver, size, frames, fps):
    w, h = size
    channel = f"scaling-{os.getpid()}-{random.randrange(1 << 30):x}"
    port = random.randrange(20000, 60000, 2)
    live = "is-live=true" if fps else ""
    rate = f"{fps or 30}/1"
    producer_desc = (
        f"videotestsrc {live} num-buffers={frames} pattern=smpte horizontal-speed=4 "
        f"! video/x-raw,format=RGB,width={w},height={h},framerate={rate} "
        f"! rscudaipcsink channel={channel} sync={'true' if fps else 'false'}")
    sender_desc = (f"rscudaipcsrc name=src channel={channel} connect-timeout=30000 ! "
                   + sender.format(port=port))
    processes = {}
    if receiver:
        processes["receiver"] = spawn(receiver.format(port=port, w=w, h=h), idle=2.0)
        time.sleep(0.5)
    processes["sender"] = spawn(sender_desc, idle=2.0)
    time.sleep(0.3)
    processes["producer"] = spawn(producer_desc)
    results = {role: result(p) for role, p in processes.items()}
    end = results.get("receiver", results["sender"])
    sent = int(results["sender"].get("sent") or 0)
    got = int(end.get("frames", 0))
    active = float(end.get("active", 0))
    row = {
        "name": name,
        "fps": got / active if active > 0 else 0.0,
        "received": f"{got}/{sent}",
    }
    for role in ("producer", "sender", "receiver"):
        r = results.get(role)
        if r is None:
            row[role] = "-"
        elif "error" in r and "cpu" not in r:
            row[role] = "error"
        else:
            span = float(r.get("active") or 0) or active
            row[role] = f"{100 * float(r['cpu']) / span:.0f}%" if span > 0 else "?"
    errors = [f"{role}: {r['error']}" for role, r in results.items() if "error" in r]
    row["note"] = "; ".join(errors)
    return row


def fanout(size, frames):
    """A local reader and an H.264/RTP sender on one channel: how the local
    reader fares with the sender reading every frame, or only the latest."""
    w, h = size
    print(f"fan-out, {w}x{h} RGB, {frames} frames unpaced")
    print()
    print("| network sender | local reader | network receiver |")
    print("|---|---:|---:|")
    for mode in (None, "every", "latest"):
        channel = f"scaling-{os.getpid()}-{random.randrange(1 << 30):x}"
        port = random.randrange(20000, 60000, 2)
        processes = {}
        if mode:
            processes["receiver"] = spawn(
                f"udpsrc port={port} buffer-size=33554432 caps=\"{RTP_H264}\" "
                "! rtph264depay ! h264parse ! openh264dec ! fakesink name=sink sync=false",
                idle=2.0)
            time.sleep(0.5)
            processes["sender"] = spawn(
                f"rscudaipcsrc name=src channel={channel} connect-timeout=30000 frames={mode} "
                f"! {I420} ! {X264} ! rtph264pay config-interval=1 "
                f"! udpsink host=127.0.0.1 port={port} sync=false", idle=2.0)
        processes["local"] = spawn(
            f"rscudaipcsrc name=src channel={channel} connect-timeout=30000 "
            "! fakesink name=sink sync=false", idle=2.0)
        time.sleep(0.5)
        processes["producer"] = spawn(
            f"videotestsrc num-buffers={frames} pattern=smpte horizontal-speed=4 "
            f"! video/x-raw,format=RGB,width={w},height={h},framerate=30/1 "
            f"! rscudaipcsink channel={channel} sync=false")
        results = {role: result(p) for role, p in processes.items()}
        local = results["local"]
        rate = int(local["frames"]) / float(local["active"]) if float(local["active"]) else 0
        remote = f"{results['receiver']['frames']} frames" if mode else "-"
        sender = f"rscudaipcsrc frames={mode}" if mode else "none"
        print(f"| {sender} | {local['frames']} frames at {rate:.0f} frames/s | {remote} |",
              flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--role")
    parser.add_argument("--idle", type=float, default=1.0)
    parser.add_argument("--size", default="640x360")
    parser.add_argument("--frames", type=int, default=600)
    parser.add_argument("--paced-frames", type=int, default=300)
    parser.add_argument("--only")
    parser.add_argument("--fanout", action="store_true",
                        help="the fan-out measurement instead of the table")
    args = parser.parse_args()
    if args.role:
        return run_role(args.role, args.idle)

    Gst.init(None)
    if Gst.ElementFactory.find("rscudaipcsrc") is None:
        sys.exit("rscudaipcsrc not found: set GST_PLUGIN_PATH to the folder of libgstcudaipc.so")
    w, h = (int(v) for v in args.size.split("x"))
    if args.fanout:
        fanout((w, h), args.frames)
        return 0
    print(f"{w}x{h} RGB; {os.cpu_count()} CPU cores; GStreamer {Gst.version_string()}")
    print()
    print("| path | mode | frames/s at the end | frames received/sent "
          "| CPU producer | CPU sender | CPU receiver | note |")
    print("|---|---|---|---|---|---|---|---|")
    for name, sender, receiver, needs in configurations():
        if args.only and args.only not in name:
            continue
        missing = [e for e in needs if Gst.ElementFactory.find(e) is None]
        if missing:
            print(f"| {name} | | | | | | | not run: {', '.join(missing)} missing |")
            continue
        for mode, frames, fps in (("unpaced", args.frames, 0),
                                  ("30 fps live", args.paced_frames, 30)):
            row = measure(name, sender, receiver, (w, h), frames, fps)
            print(f"| {name} | {mode} | {row['fps']:.0f} | {row['received']} "
                  f"| {row['producer']} | {row['sender']} | {row['receiver']} "
                  f"| {row['note']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
