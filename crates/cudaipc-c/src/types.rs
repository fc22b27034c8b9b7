// SPDX-License-Identifier: MPL-2.0

//! The C types: enums (passed as `uint32_t` and checked, since C may hold
//! any value in them), the layout, options and info structs, and the
//! conversions to the Rust API's types.

use std::ffi::{CStr, c_char, c_void};
use std::time::Duration;

use api::{Plane, VideoFormat, VideoLayout};

use crate::status::{
    CUDAIPC_ERROR_INVALID_ARGUMENT, CUDAIPC_ERROR_UNSUPPORTED_FORMAT, Failure, Result,
};

/// The most planes a frame has (I420 has 3; one spare).
pub const CUDAIPC_MAX_PLANES: usize = 4;

/// Pixel formats, as named in GStreamer caps. 0 is no format, so a zeroed
/// layout is refused rather than taken for RGB.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum cudaipc_format {
    /// Packed 8-bit R, G, B: 3 bytes a pixel.
    CUDAIPC_FORMAT_RGB = 1,
    /// Packed 8-bit R, G, B, A.
    CUDAIPC_FORMAT_RGBA = 2,
    /// Packed 8-bit B, G, R, A.
    CUDAIPC_FORMAT_BGRA = 3,
    /// Packed 8-bit R, G, B and an unused byte.
    CUDAIPC_FORMAT_RGBX = 4,
    /// Packed 8-bit B, G, R and an unused byte.
    CUDAIPC_FORMAT_BGRX = 5,
    /// One 8-bit luma plane.
    CUDAIPC_FORMAT_GRAY8 = 6,
    /// 4:2:0, a luma plane then interleaved U and V.
    CUDAIPC_FORMAT_NV12 = 7,
    /// 4:2:0, a luma plane, a U plane, a V plane.
    CUDAIPC_FORMAT_I420 = 8,
}

const FORMATS: [(cudaipc_format, VideoFormat); 8] = [
    (cudaipc_format::CUDAIPC_FORMAT_RGB, VideoFormat::Rgb),
    (cudaipc_format::CUDAIPC_FORMAT_RGBA, VideoFormat::Rgba),
    (cudaipc_format::CUDAIPC_FORMAT_BGRA, VideoFormat::Bgra),
    (cudaipc_format::CUDAIPC_FORMAT_RGBX, VideoFormat::Rgbx),
    (cudaipc_format::CUDAIPC_FORMAT_BGRX, VideoFormat::Bgrx),
    (cudaipc_format::CUDAIPC_FORMAT_GRAY8, VideoFormat::Gray8),
    (cudaipc_format::CUDAIPC_FORMAT_NV12, VideoFormat::Nv12),
    (cudaipc_format::CUDAIPC_FORMAT_I420, VideoFormat::I420),
];

pub(crate) fn format_from_c(value: u32) -> Result<VideoFormat> {
    FORMATS
        .iter()
        .find(|(c, _)| *c as u32 == value)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            Failure::new(
                CUDAIPC_ERROR_UNSUPPORTED_FORMAT,
                format!(
                    "unknown format {value} (one of CUDAIPC_FORMAT_RGB .. CUDAIPC_FORMAT_I420)"
                ),
            )
        })
}

pub(crate) fn format_to_c(format: VideoFormat) -> u32 {
    FORMATS
        .iter()
        .find(|(_, f)| *f == format)
        .map_or(0, |(c, _)| *c as u32)
}

/// Where a publisher's slots live.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum cudaipc_transport {
    /// CUDA device memory when a device is usable, else host memory.
    CUDAIPC_TRANSPORT_AUTO = 0,
    /// CUDA device memory, shared with CUDA IPC.
    CUDAIPC_TRANSPORT_CUDA = 1,
    /// Shared host memory: no GPU on either side.
    CUDAIPC_TRANSPORT_HOST = 2,
}

/// What a publisher does when consumers hold every slot.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum cudaipc_when_full {
    /// Wait for a slot (lossless).
    CUDAIPC_WHEN_FULL_BLOCK = 0,
    /// Drop the frame (`CUDAIPC_DROPPED`; a loan fails with
    /// `CUDAIPC_ERROR_NO_FREE_SLOT`).
    CUDAIPC_WHEN_FULL_DROP = 1,
}

/// How consumers reach a channel.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum cudaipc_ipc_mode {
    /// Publisher: named files (legacy). Subscriber: the socket if the
    /// channel has one, else the files.
    CUDAIPC_IPC_AUTO = 0,
    /// Named files in the shm folder, legacy CUDA IPC handles.
    CUDAIPC_IPC_LEGACY = 1,
    /// Descriptors over the channel's unix socket (VMM handles).
    CUDAIPC_IPC_FD = 2,
}

/// Which frames a subscriber gets.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum cudaipc_frames {
    /// Every frame; on a live channel at this subscriber's own pace (it
    /// may miss frames rather than hold the producer back).
    CUDAIPC_FRAMES_AUTO = 0,
    /// Every frame, live or not: the producer waits for it.
    CUDAIPC_FRAMES_EVERY = 1,
    /// Only the newest frame; never holds the producer back.
    CUDAIPC_FRAMES_LATEST = 2,
}

/// What a frame's data is (`cudaipc_frame_get_data`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum cudaipc_frame_data_kind {
    /// The frame carries no data.
    CUDAIPC_FRAME_DATA_NONE = 0,
    /// Opaque bytes (`cudaipc_loan_set_data`, Python's `data=b"..."`, a
    /// GStreamer producer's `CudaIpcFrameData` field `bytes`).
    CUDAIPC_FRAME_DATA_BYTES = 1,
    /// UTF-8 JSON text (`cudaipc_loan_set_json`, Python's `data={...}`, a
    /// GStreamer producer's `CudaIpcFrameData` field `json`).
    CUDAIPC_FRAME_DATA_JSON = 2,
}

/// A frame's format, size and memory layout.
///
/// As input (`cudaipc_publisher_create`): `n_planes` 0 asks for
/// GStreamer's default layout of the format (strides, offsets and
/// `frame_size` are ignored); otherwise `n_planes` must be the format's
/// plane count, with `strides` and `offsets` of each plane in a frame of
/// `frame_size` bytes (at most about 2^57: a ring of 64 such slots must
/// fit in memory; more is `CUDAIPC_ERROR_INVALID_LAYOUT`). `fps_d` 0
/// means no frame rate in the caps.
/// As output every field is filled.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaipc_layout {
    /// A `cudaipc_format`.
    pub format: u32,
    /// Pixels a row.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// Planes of the format (1, 2 for NV12, 3 for I420).
    pub n_planes: u32,
    /// Bytes from a row's start to the next's, per plane.
    pub strides: [u32; CUDAIPC_MAX_PLANES],
    /// Byte offset of each plane from the frame's start.
    pub offsets: [u64; CUDAIPC_MAX_PLANES],
    /// Bytes of a whole frame.
    pub frame_size: u64,
    /// Frame rate numerator (caps only; frames are paced by the publisher).
    pub fps_n: u32,
    /// Frame rate denominator; 0: none announced.
    pub fps_d: u32,
}

impl cudaipc_layout {
    pub(crate) fn from_rust(layout: &VideoLayout) -> Self {
        let mut strides = [0; CUDAIPC_MAX_PLANES];
        let mut offsets = [0; CUDAIPC_MAX_PLANES];
        for (i, plane) in layout.planes().iter().enumerate().take(CUDAIPC_MAX_PLANES) {
            strides[i] = plane.stride;
            offsets[i] = plane.offset;
        }
        let (fps_n, fps_d) = layout.framerate();
        Self {
            format: format_to_c(layout.format()),
            width: layout.width(),
            height: layout.height(),
            n_planes: layout.planes().len() as u32,
            strides,
            offsets,
            frame_size: layout.frame_size() as u64,
            fps_n,
            fps_d: if fps_n == 0 { 0 } else { fps_d },
        }
    }

    pub(crate) fn to_rust(self) -> Result<VideoLayout> {
        let format = format_from_c(self.format)?;
        let layout = match self.n_planes as usize {
            0 => VideoLayout::new(format, self.width, self.height)?,
            n if n <= CUDAIPC_MAX_PLANES => {
                let planes: Vec<Plane> = (0..n)
                    .map(|i| Plane {
                        offset: self.offsets[i],
                        stride: self.strides[i],
                    })
                    .collect();
                let size = usize::try_from(self.frame_size).map_err(|_| {
                    Failure::new(CUDAIPC_ERROR_INVALID_ARGUMENT, "frame_size exceeds memory")
                })?;
                VideoLayout::with_planes(format, self.width, self.height, &planes, size)?
            }
            n => {
                return Err(Failure::new(
                    CUDAIPC_ERROR_INVALID_ARGUMENT,
                    format!("n_planes is {n}, at most {CUDAIPC_MAX_PLANES}"),
                ));
            }
        };
        if self.fps_d == 0 {
            return Ok(layout);
        }
        Ok(layout.with_framerate(self.fps_n, self.fps_d)?)
    }
}

/// How `cudaipc_publisher_create` sets a publisher up. Fill it with
/// `cudaipc_publisher_options_init` (the elements' defaults), then change
/// fields. `struct_size` must stay `sizeof(cudaipc_publisher_options)`:
/// it tells the library which version of the struct it was given. A
/// struct of the version before `frame_data_bound` (its `struct_size` 36,
/// a program built against that header) is taken with that field's
/// default, 16384.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaipc_publisher_options {
    /// `sizeof(cudaipc_publisher_options)`.
    pub struct_size: u32,
    /// A `cudaipc_transport` (default AUTO).
    pub transport: u32,
    /// Slots in the ring, 0 to 64; 0: chosen as `rscudaipcsink` does.
    pub slots: u32,
    /// File mode of the channel's shared files, 0 to 0777 (octal: read,
    /// write and execute bits only; default 0600). Anything else is
    /// `CUDAIPC_ERROR_INVALID_ARGUMENT`.
    pub permissions: u32,
    /// A `cudaipc_when_full` (default BLOCK).
    pub when_full: u32,
    /// Consumers to wait for before the first frame, 0 to 32 (a channel's
    /// most; default 0).
    pub wait_for_consumers: u32,
    /// A `cudaipc_ipc_mode` (default AUTO: legacy).
    pub ipc_mode: u32,
    /// CUDA device ordinal of the slots (default 0).
    pub device: i32,
    /// Non-zero: a live channel (frames at a fixed rate); consumers keep
    /// their own pace (default 0).
    pub live: u32,
    /// Bytes of data each frame may carry (`cudaipc_loan_set_data` and
    /// `_set_json`, `cudaipc_publisher_publish_with_data` and `_with_json`;
    /// a GStreamer producer's metas), 0 to 1048576, framing included: the
    /// data itself gets 16 bytes less. Default 16384; 0: frames carry no
    /// data. Anything else is `CUDAIPC_ERROR_INVALID_ARGUMENT`.
    pub frame_data_bound: u32,
}

/// `struct_size` of a `cudaipc_publisher_options` of the version before
/// `frame_data_bound` (which the library still takes).
pub(crate) const PUBLISHER_OPTIONS_V1_SIZE: usize =
    std::mem::offset_of!(cudaipc_publisher_options, frame_data_bound);

/// How `cudaipc_subscriber_open` attaches. Fill it with
/// `cudaipc_subscriber_options_init`, then change fields; `struct_size`
/// must stay `sizeof(cudaipc_subscriber_options)`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaipc_subscriber_options {
    /// `sizeof(cudaipc_subscriber_options)`.
    pub struct_size: u32,
    /// A `cudaipc_frames` (default AUTO).
    pub frames: u32,
    /// Frames kept while asking for the next (a batch of 8: 7), 0 to 62 (a
    /// ring has at most 64 slots, and a hold of N needs N+2); -1: not
    /// declared (default). Anything else is
    /// `CUDAIPC_ERROR_INVALID_ARGUMENT`.
    pub hold: i32,
    /// A `cudaipc_ipc_mode` (default AUTO).
    pub ipc_mode: u32,
    /// Milliseconds the open waits for a producer; negative: forever
    /// (default 10000).
    pub timeout_ms: i64,
    /// CUDA device to read a cuda channel on; -1: the producer's (default).
    pub device: i32,
    /// Reserved, 0.
    pub reserved: u32,
}

/// What `cudaipc_frame_get_info` tells of a frame. Set `struct_size` to
/// `sizeof(cudaipc_frame_info)` before the call. Pointers in it are valid
/// until the frame is released.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaipc_frame_info {
    /// `sizeof(cudaipc_frame_info)`, set by the caller.
    pub struct_size: u32,
    /// Non-zero: the frame is in CUDA device memory (`device_ptr`), else
    /// in shared host memory (`host_ptr`).
    pub is_cuda: u32,
    /// Format, size, strides and plane offsets of this frame.
    pub layout: cudaipc_layout,
    /// The frame's sequence number in the channel.
    pub sequence: u64,
    /// Its time in the stream in nanoseconds; -1: none.
    pub pts_ns: i64,
    /// Frames lost right before this one (fell behind a live producer, or a
    /// dropping producer overwrote them).
    pub missed_before: u64,
    /// Host transport: the frame's bytes (`layout.frame_size` of them), the
    /// shared memory itself; NULL on the cuda transport.
    pub host_ptr: *const u8,
    /// Cuda transport: the frame's device address (a `CUdeviceptr`); 0 on
    /// the host transport.
    pub device_ptr: u64,
    /// Cuda transport: the `CUstream` (primary context) ordered after the
    /// producer's writes; NULL on the host transport.
    pub cuda_stream: *mut c_void,
    /// Cuda transport: the device's ordinal; -1 on the host transport.
    pub device_ordinal: i32,
    /// Reserved, 0.
    pub reserved: u32,
}

/// What `cudaipc_loan_get_info` tells of a loaned slot. Set `struct_size`
/// to `sizeof(cudaipc_loan_info)` before the call. Pointers in it are
/// valid until the loan is published or discarded.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cudaipc_loan_info {
    /// `sizeof(cudaipc_loan_info)`, set by the caller.
    pub struct_size: u32,
    /// Non-zero: the slot is CUDA device memory (`device_ptr`).
    pub is_cuda: u32,
    /// The layout to write the frame in.
    pub layout: cudaipc_layout,
    /// Host transport: where to write the frame's `layout.frame_size`
    /// bytes; NULL on the cuda transport.
    pub host_ptr: *mut u8,
    /// Cuda transport: the slot's device address; 0 on the host transport.
    pub device_ptr: u64,
    /// Cuda transport: the `CUstream` that orders writes after the
    /// consumers' reads of the slot's last frame and before the publish.
    pub cuda_stream: *mut c_void,
    /// Cuda transport: the device's ordinal; -1 on the host transport.
    pub device_ordinal: i32,
    /// Reserved, 0.
    pub reserved: u32,
}

/// `*ptr`, after checking it is not NULL and that its leading `struct_size`
/// is `size_of::<T>()`.
///
/// # Safety
/// A non-NULL `ptr` points to at least a readable `u32`, and to a whole `T`
/// where that `u32` says so.
pub(crate) unsafe fn read_sized<T: Copy>(ptr: *const T, what: &str) -> Result<T> {
    // SAFETY: the caller's contract.
    let size = unsafe { struct_size(ptr.cast(), what) }?;
    check_size::<T>(size, what)?;
    // SAFETY: not NULL, and the caller's `struct_size` says a whole `T` is
    // there; `read_unaligned` asks nothing of the alignment.
    Ok(unsafe { ptr.read_unaligned() })
}

/// `*ptr` as `read_sized` reads it, where an older version of `T`, its
/// first `older` bytes, is taken too: the fields it lacks are `defaults`'.
///
/// # Safety
/// A non-NULL `ptr` points to at least a readable `u32`, and to as many
/// readable bytes as that `u32` says where it is `older` or `size_of::<T>()`.
pub(crate) unsafe fn read_versioned<T: Copy>(
    ptr: *const T,
    older: usize,
    defaults: T,
    what: &str,
) -> Result<T> {
    // SAFETY: the caller's contract.
    let size = unsafe { struct_size(ptr.cast(), what) }?;
    if size as usize != older || older >= size_of::<T>() {
        check_size::<T>(size, what)?;
        // SAFETY: not NULL, and its `struct_size` says a whole `T` is there.
        return Ok(unsafe { ptr.read_unaligned() });
    }
    let mut value = defaults;
    // SAFETY: the caller's `struct_size` says `older` bytes are readable at
    // `ptr`; they are the leading fields of `T` (plain integers: any bytes
    // are a value), written over the defaults' own, and `older` is less
    // than `T`'s size.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&raw mut value).cast::<u8>(), older);
    }
    Ok(value)
}

/// Checks `ptr` as `read_sized` does, for a struct the call writes.
///
/// # Safety
/// As for `read_sized`.
pub(crate) unsafe fn check_out<T>(ptr: *mut T, what: &str) -> Result<()> {
    // SAFETY: the caller's contract.
    let size = unsafe { struct_size(ptr.cast_const().cast(), what) }?;
    check_size::<T>(size, what)
}

/// The `struct_size` a struct starts with.
///
/// # Safety
/// A non-NULL `ptr` points to a readable `u32`.
unsafe fn struct_size(ptr: *const u32, what: &str) -> Result<u32> {
    if ptr.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; every struct with a `struct_size` starts with it,
    // and the callers' contract says a `u32` is readable there.
    Ok(unsafe { ptr.read_unaligned() })
}

fn check_size<T>(size: u32, what: &str) -> Result<()> {
    if size as usize != size_of::<T>() {
        return Err(Failure::new(
            CUDAIPC_ERROR_INVALID_ARGUMENT,
            format!(
                "{what}: struct_size is {size}, this libcudaipc's is {} (set it with the init function or sizeof)",
                size_of::<T>()
            ),
        ));
    }
    Ok(())
}

/// Writes `value` to `out` after checking it is not NULL.
///
/// # Safety
/// A non-NULL `out` is valid for a write of a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: not NULL; the caller's contract.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// The channel name `name` points to.
///
/// # Safety
/// A non-NULL `name` is a NUL-terminated string.
pub(crate) unsafe fn channel_name<'a>(name: *const c_char) -> Result<&'a str> {
    if name.is_null() {
        return Err(Failure::null("the channel name"));
    }
    // SAFETY: not NULL; the caller's contract says it is NUL-terminated.
    unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| {
        Failure::new(
            CUDAIPC_ERROR_INVALID_ARGUMENT,
            "the channel name is not UTF-8",
        )
    })
}

/// The application's bytes at `data` (`len` of them; NULL where `len` is 0),
/// copied; `what` names `data` in an error.
///
/// # Safety
/// A non-NULL `data` is readable for `len` bytes.
pub(crate) unsafe fn app_bytes(
    data: *const c_void,
    len: usize,
    what: &str,
) -> Result<api::AppData> {
    if len == 0 {
        return Ok(api::AppData::Bytes(Vec::new()));
    }
    if data.is_null() {
        return Err(Failure::null(what));
    }
    // Before a slice is made of them: no channel's frames carry more (and
    // a length above `isize::MAX` may not be a slice).
    let most = api::Setting::FrameDataBound.max() as usize;
    if len > most {
        return Err(Failure::new(
            CUDAIPC_ERROR_INVALID_ARGUMENT,
            format!(
                "per-frame data of {len} bytes: no channel's frames carry more than {most} (cudaipc_publisher_options.frame_data_bound sets what this one's carry)"
            ),
        ));
    }
    // SAFETY: not NULL; the caller's contract says `len` bytes are
    // readable there, and `len` is at most a mebibyte.
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
    Ok(api::AppData::Bytes(bytes.to_vec()))
}

/// The application's JSON text `json` (NUL-terminated UTF-8), copied.
///
/// # Safety
/// A non-NULL `json` is a NUL-terminated string.
pub(crate) unsafe fn app_json(json: *const c_char) -> Result<api::AppData> {
    if json.is_null() {
        return Err(Failure::null("json"));
    }
    // SAFETY: not NULL; the caller's contract says it is NUL-terminated.
    let text = unsafe { CStr::from_ptr(json) }.to_str().map_err(|e| {
        Failure::new(
            CUDAIPC_ERROR_INVALID_ARGUMENT,
            format!("json is not UTF-8 text ({e})"),
        )
    })?;
    Ok(api::AppData::Json(text.to_owned()))
}

/// A timeout in milliseconds, negative for none.
pub(crate) fn timeout(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// A PTS in nanoseconds, negative for none.
pub(crate) fn pts(ns: i64) -> Option<Duration> {
    u64::try_from(ns).ok().map(Duration::from_nanos)
}

/// `value` as one of `N` enum values (0..N), else an error naming `what`.
pub(crate) fn enum_value(value: u32, count: u32, what: &str) -> Result<u32> {
    if value < count {
        Ok(value)
    } else {
        Err(Failure::new(
            CUDAIPC_ERROR_INVALID_ARGUMENT,
            format!("{what} is {value}, not one of its {count} values"),
        ))
    }
}
