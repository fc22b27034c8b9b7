# SPDX-License-Identifier: MPL-2.0
"""examples/python/many_cameras.py: one process reading several producer
processes' channels, a batch a round (host transport)."""

from conftest import example, unique_channel
from test_pace import HEIGHT, WIDTH, published, python_publisher


def means_of(numbers):
    return "mean=" + ",".join(f"{published(n).mean():.3f}" for n in numbers)


def test_one_process_batches_every_frame_of_three_cameras_in_rounds(children):
    channels = [unique_channel(f"camera{i}") for i in range(3)]
    producers = [python_publisher(children, channel, 4, 12) for channel in channels]
    consumer = children(example("many_cameras.py", *channels, "--frames", "every",
                                "--backend", "numpy", "--timeout", "20")).finish()
    consumer.assert_success("many_cameras.py")
    for producer in producers:
        producer.finish().assert_success("cudaipc_publish.py")
    rounds = [line.split() for line in consumer.stdout.splitlines() if line.startswith("round ")]
    # Round N stacked frame N of every camera, intact, in the channels' order.
    assert [r[-1] for r in rounds] == [means_of([n, n, n]) for n in range(12)]
    assert consumer.stdout.splitlines()[-1] == "summary rounds=12 cameras=3"


def test_cameras_whose_frames_differ_in_shape_are_named_not_stacked(children):
    small = unique_channel("camera-small")
    large = unique_channel("camera-large")
    producers = [
        python_publisher(children, large, 4, 3),
        # The later --width and --height win over the helper's.
        python_publisher(children, small, 4, 3, "--width", str(WIDTH // 2),
                         "--height", str(HEIGHT // 2)),
    ]
    consumer = children(example("many_cameras.py", large, small, "--frames", "every",
                                "--backend", "numpy", "--timeout", "20")).finish()
    assert consumer.code == 1, consumer.stdout + consumer.stderr
    assert "differ in shape and cannot be stacked" in consumer.stderr
    assert f"{large} ({HEIGHT}, {WIDTH})" in consumer.stderr
    assert f"{small} ({HEIGHT // 2}, {WIDTH // 2})" in consumer.stderr
    assert "round " not in consumer.stdout
    # The producers lose nothing to the consumer's refusal: they end as usual.
    for producer in producers:
        producer.finish().assert_success("cudaipc_publish.py")


def test_a_camera_without_a_producer_is_a_clear_error(children):
    channel = unique_channel("camera-live")
    missing = unique_channel("camera-missing")
    producer = python_publisher(children, channel, 4, 2)
    consumer = children(example("many_cameras.py", channel, missing, "--backend", "numpy",
                                "--timeout", "2")).finish()
    assert consumer.code == 1, consumer.stdout + consumer.stderr
    assert "NoProducerError" in consumer.stderr and missing in consumer.stderr
    producer.kill()
