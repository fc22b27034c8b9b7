# SPDX-License-Identifier: MPL-2.0
"""Frames of GStreamer applications: a buffer that ``rscudaipcsrc`` pushed
into an ``appsink``, as a ``cudaipc.Frame`` (DLPack, CUDA Array Interface),
without a copy. Needs PyGObject (Debian: python3-gi, gir1.2-gstreamer-1.0,
gir1.2-gst-plugins-base-1.0); imported only when called."""

import ctypes
import json

from ._errors import InvalidArgumentError
from ._native import gst_buffer_frame

META_NAME = "CudaIpcMeta"
# An application's data per frame (src/frame_data/app_data.rs): field
# "bytes" (GBytes) or "json" (a string).
DATA_META_NAME = "CudaIpcFrameData"
CUDA_FEATURE = "memory:CUDAMemory"
NO_META = (
    "the buffer carries no CudaIpcMeta: it is not a frame of rscudaipcsrc in "
    "the plugin's own CUDA memory. GstCudaMemory (what rscudaipcsrc outputs "
    "with output-memory=gstcuda, or when one of GStreamer's CUDA elements "
    "follows it) has none: give rscudaipcsrc output-memory=cudaipc and read "
    "its buffers (rscudaipcsrc ! appsink)"
)


def _gi():
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstVideo", "1.0")
    from gi.repository import Gst, GstVideo

    return Gst, GstVideo


class _MapInfo(ctypes.Structure):
    """GstMapInfo (gst/gstmemory.h)."""

    _fields_ = [
        ("memory", ctypes.c_void_p),
        ("flags", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("maxsize", ctypes.c_size_t),
        ("user_data", ctypes.c_void_p * 4),
        ("_gst_reserved", ctypes.c_void_p * 4),
    ]


_GST_MAP_READ = 1
_G_TYPE_STRING = 16 << 2
_libgst = None
_libgobject = None


def _gst_library():
    global _libgst
    if _libgst is None:
        lib = ctypes.CDLL("libgstreamer-1.0.so.0")
        lib.gst_buffer_map.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MapInfo), ctypes.c_int]
        lib.gst_buffer_map.restype = ctypes.c_int
        lib.gst_buffer_unmap.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MapInfo)]
        lib.gst_buffer_unmap.restype = None
        lib.gst_mini_object_ref.argtypes = [ctypes.c_void_p]
        lib.gst_mini_object_ref.restype = ctypes.c_void_p
        lib.gst_mini_object_unref.argtypes = [ctypes.c_void_p]
        lib.gst_mini_object_unref.restype = None
        lib.gst_mini_object_is_writable.argtypes = [ctypes.c_void_p]
        lib.gst_mini_object_is_writable.restype = ctypes.c_int
        lib.gst_buffer_get_custom_meta.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.gst_buffer_get_custom_meta.restype = ctypes.c_void_p
        lib.gst_buffer_add_custom_meta.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.gst_buffer_add_custom_meta.restype = ctypes.c_void_p
        lib.gst_custom_meta_get_structure.argtypes = [ctypes.c_void_p]
        lib.gst_custom_meta_get_structure.restype = ctypes.c_void_p
        lib.gst_structure_remove_field.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.gst_structure_remove_field.restype = None
        lib.gst_structure_set.restype = None
        _libgst = lib
    return _libgst


def _gobject_library():
    global _libgobject
    if _libgobject is None:
        lib = ctypes.CDLL("libgobject-2.0.so.0")
        lib.g_bytes_get_type.argtypes = []
        lib.g_bytes_get_type.restype = ctypes.c_size_t
        lib.g_bytes_new.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.g_bytes_new.restype = ctypes.c_void_p
        lib.g_bytes_unref.argtypes = [ctypes.c_void_p]
        lib.g_bytes_unref.restype = None
        _libgobject = lib
    return _libgobject


class _BufferReference:
    """A reference to a GstBuffer of its own (so its slot stays with us),
    held by the frame until it is released and its exports are gone. The
    GstBuffer's address is what PyGObject's hash() of a boxed object is."""

    def __init__(self, buffer):
        self.pointer = hash(buffer)
        _gst_library().gst_mini_object_ref(self.pointer)

    def __del__(self):
        _gst_library().gst_mini_object_unref(self.pointer)


class _ReadMap(_BufferReference):
    """A read map of a buffer in system memory, with its reference.
    PyGObject's own map gives a copy of the bytes (MapInfo.data): the
    buffer is mapped through libgstreamer."""

    def __init__(self, buffer):
        super().__init__(buffer)
        self._info = _MapInfo()
        self._mapped = bool(_gst_library().gst_buffer_map(
            self.pointer, ctypes.byref(self._info), _GST_MAP_READ))
        if not self._mapped:
            raise InvalidArgumentError("the buffer cannot be mapped for reading")
        if self._info.size != buffer.get_size():
            raise InvalidArgumentError("the buffer's map does not cover the buffer")

    @property
    def address(self):
        return self._info.data or 0

    @property
    def size(self):
        return self._info.size

    def __del__(self):
        if self._mapped:
            self._mapped = False
            _gst_library().gst_buffer_unmap(self.pointer, ctypes.byref(self._info))
        super().__del__()


def _planes(buffer, GstVideo):
    """Offsets and strides from the buffer's GstVideoMeta, or None (the
    caps' default layout)."""
    meta = GstVideo.buffer_get_video_meta(buffer)
    if meta is None:
        return None
    count = meta.n_planes
    return list(meta.offset)[:count], list(meta.stride)[:count]


def _meta(buffer):
    meta = buffer.get_custom_meta(META_NAME)
    if meta is None:
        return None
    structure = meta.get_structure()
    fields = {}
    for name in ("device-ptr", "size", "device-id", "cuda-stream"):
        if not structure.has_field(name):
            raise InvalidArgumentError(
                f"the buffer's CudaIpcMeta has no '{name}': an rscudaipcsrc older than "
                "this cudaipc package; use the plugin built with it")
        fields[name] = structure.get_value(name)
    return fields


def _data_fields(buffer):
    """The "bytes" (as bytes) and "json" fields of the buffer's
    CudaIpcFrameData, each None where it has none."""
    meta = buffer.get_custom_meta(DATA_META_NAME)
    if meta is None:
        return None, None
    # PyGObject's structure is a copy: good for reading.
    structure = meta.get_structure()
    raw = structure.get_value("bytes") if structure.has_field("bytes") else None
    text = structure.get_value("json") if structure.has_field("json") else None
    if raw is not None:
        raw = bytes(raw.get_data()) if hasattr(raw, "get_data") else None
    return raw, text if isinstance(text, str) else None


def gst_buffer_data(buffer):
    """The data an application attached to ``buffer`` (a Gst.Buffer): its
    ``CudaIpcFrameData`` meta, as ``rscudaipcsrc`` puts there the data a
    producer published with the frame (``publish(..., data=)``): bytes, the
    dict of its JSON text (``json.loads``), or None."""
    raw, text = _data_fields(buffer)
    if raw is not None:
        return raw
    return None if text is None else json.loads(text)


def set_gst_buffer_data(buffer, data):
    """Attaches ``data`` to ``buffer`` (a writable Gst.Buffer, e.g. one made
    for ``appsrc``) as its ``CudaIpcFrameData`` meta, which ``rscudaipcsink``
    carries with the frame (``frame.data`` of a Subscriber): bytes,
    bytearray or memoryview as the field ``bytes`` (a GBytes), a dict as the
    field ``json`` (its ``json.dumps`` text, compact), replacing data set
    before. The plugin registers the meta: load it first (e.g. make an
    ``rscudaipcsink``, or ``Gst.ElementFactory.find("rscudaipcsink").load()``).

    Through libgstreamer: PyGObject's ``meta.get_structure()`` is a copy,
    so ``set_value`` on it does not reach the buffer."""
    if isinstance(data, dict):
        field, value = b"json", json.dumps(data, separators=(",", ":"), allow_nan=False)
    elif isinstance(data, (bytes, bytearray, memoryview)):
        field, value = b"bytes", bytes(data)
    else:
        raise TypeError(f"data takes bytes, a bytearray, a memoryview or a dict, not "
                        f"{type(data).__name__}")
    lib = _gst_library()
    pointer = hash(buffer)
    if not lib.gst_mini_object_is_writable(pointer):
        raise InvalidArgumentError("the buffer is not writable (another reference holds it): "
                                   "set its data before pushing it, or on a copy")
    meta = lib.gst_buffer_get_custom_meta(pointer, DATA_META_NAME.encode())
    if not meta:
        meta = lib.gst_buffer_add_custom_meta(pointer, DATA_META_NAME.encode())
    if not meta:
        raise InvalidArgumentError(
            f"{DATA_META_NAME} is not registered: load the cudaipc plugin first "
            "(Gst.ElementFactory.find('rscudaipcsink').load())")
    structure = ctypes.c_void_p(lib.gst_custom_meta_get_structure(meta))
    other = b"bytes" if field == b"json" else b"json"
    lib.gst_structure_remove_field(structure, other)
    if field == b"json":
        lib.gst_structure_set(structure, field, ctypes.c_size_t(_G_TYPE_STRING),
                              ctypes.c_char_p(value.encode()), None)
        return
    gobject = _gobject_library()
    gbytes = gobject.g_bytes_new(value, len(value))
    try:
        lib.gst_structure_set(structure, field, ctypes.c_size_t(gobject.g_bytes_get_type()),
                              ctypes.c_void_p(gbytes), None)
    finally:
        gobject.g_bytes_unref(gbytes)


def from_gst_buffer(buffer, caps):
    """The frame of ``buffer`` (a Gst.Buffer that ``rscudaipcsrc`` pushed,
    of ``caps``): a ``cudaipc.Frame`` whose DLPack and CUDA Array Interface
    exports point at the frame's slot, without a copy.

    CUDA memory (the cuda transport): the buffer's ``CudaIpcMeta`` gives the
    device pointer and the source's CUDA stream; ``__dlpack__(stream=s)``
    makes ``s`` wait for it on the GPU, and the release orders the source's
    stream after the streams the frame was exported to. System memory (the
    host transport): the buffer is mapped read-only for the frame's life.

    The frame holds the buffer, and so the slot, until it is released
    (``release()``, a ``with`` block) and its exports are gone. Its ``data``
    is the buffer's ``CudaIpcFrameData`` (see ``gst_buffer_data``).
    """
    Gst, GstVideo = _gi()
    if buffer is None or caps is None:
        raise InvalidArgumentError("a buffer and its caps are needed (the sample had none)")
    if not caps.is_fixed():
        raise InvalidArgumentError(f"caps {caps.to_string()} are not fixed")
    planes = _planes(buffer, GstVideo)
    pts = None if buffer.pts == Gst.CLOCK_TIME_NONE else buffer.pts
    offset = None if buffer.offset == Gst.BUFFER_OFFSET_NONE else buffer.offset
    meta = _meta(buffer)
    app_bytes, app_json = _data_fields(buffer)
    if meta is not None:
        return gst_buffer_frame(_BufferReference(buffer), caps.to_string(), planes,
                                meta["device-ptr"],
                                meta["size"], meta["device-id"], meta["cuda-stream"], pts, offset,
                                app_bytes, app_json)
    features = caps.get_features(0)
    if features is not None and features.contains(CUDA_FEATURE):
        raise InvalidArgumentError(NO_META)
    mapping = _ReadMap(buffer)
    return gst_buffer_frame(mapping, caps.to_string(), planes, mapping.address, mapping.size,
                            None, None, pts, offset, app_bytes, app_json)


def from_gst_sample(sample):
    """The frame of a Gst.Sample that an ``appsink`` after ``rscudaipcsrc``
    gave (``appsink.emit("pull-sample")``, ``try_pull_sample``): its buffer
    with its caps, as ``from_gst_buffer``."""
    if sample is None:
        raise InvalidArgumentError("no sample (the appsink is at the end of the stream)")
    return from_gst_buffer(sample.get_buffer(), sample.get_caps())
