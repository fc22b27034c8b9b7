// SPDX-License-Identifier: MPL-2.0

//! Video formats and frame layouts, and the caps strings the channel carries
//! (the text form of GStreamer caps, written and read here without
//! GStreamer).

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// The pixel formats the plugin's elements handle (`src/video.rs`),
/// named as in GStreamer caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VideoFormat {
    /// Packed 8-bit red, green, blue: 3 bytes per pixel.
    Rgb,
    /// Packed 8-bit red, green, blue, alpha.
    Rgba,
    /// Packed 8-bit blue, green, red, alpha.
    Bgra,
    /// Packed 8-bit red, green, blue and an unused byte.
    Rgbx,
    /// Packed 8-bit blue, green, red and an unused byte.
    Bgrx,
    /// One 8-bit luma plane.
    Gray8,
    /// 4:2:0: a luma plane, then one plane of interleaved U and V.
    Nv12,
    /// 4:2:0: a luma plane, then a U plane, then a V plane.
    I420,
}

impl VideoFormat {
    /// Every supported format: the plugin's elements take this list, in
    /// this order (`src/video.rs`).
    pub const ALL: [VideoFormat; 8] = [
        VideoFormat::Rgb,
        VideoFormat::Rgba,
        VideoFormat::Bgra,
        VideoFormat::Rgbx,
        VideoFormat::Bgrx,
        VideoFormat::Gray8,
        VideoFormat::Nv12,
        VideoFormat::I420,
    ];

    /// The format's name in caps (`format=(string)NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Rgb => "RGB",
            Self::Rgba => "RGBA",
            Self::Bgra => "BGRA",
            Self::Rgbx => "RGBx",
            Self::Bgrx => "BGRx",
            Self::Gray8 => "GRAY8",
            Self::Nv12 => "NV12",
            Self::I420 => "I420",
        }
    }

    /// How many planes a frame of this format has.
    pub fn plane_count(self) -> usize {
        match self {
            Self::Nv12 => 2,
            Self::I420 => 3,
            _ => 1,
        }
    }

    /// Bytes of pixel data in one row of `plane` of a frame `width` pixels
    /// wide (without padding); 0 for a plane the format does not have.
    pub fn row_bytes(self, plane: usize, width: u32) -> u64 {
        let width = u64::from(width);
        let chroma_width = width.div_ceil(2);
        match (self, plane) {
            (Self::Rgb, 0) => width * 3,
            (Self::Rgba | Self::Bgra | Self::Rgbx | Self::Bgrx, 0) => width * 4,
            (Self::Gray8 | Self::Nv12 | Self::I420, 0) => width,
            // U and V interleaved: two bytes per chroma sample.
            (Self::Nv12, 1) => chroma_width * 2,
            (Self::I420, 1 | 2) => chroma_width,
            _ => 0,
        }
    }

    /// Rows in `plane` of a frame `height` rows high; 0 for a plane the
    /// format does not have.
    pub fn rows(self, plane: usize, height: u32) -> u64 {
        match plane {
            0 => u64::from(height),
            p if p < self.plane_count() => u64::from(height).div_ceil(2),
            _ => 0,
        }
    }
}

impl fmt::Display for VideoFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for VideoFormat {
    type Err = Error;

    /// Parses a caps format name (`"RGB"`, `"NV12"`, ...; case matters, as
    /// in caps: `RGBx` is not `RGBX`).
    fn from_str(name: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| Error::UnsupportedFormat(name.to_owned()))
    }
}

/// Where one plane of a frame lies in the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plane {
    /// Byte offset of the plane's first row from the start of the frame.
    pub offset: u64,
    /// Bytes from the start of one row to the start of the next.
    pub stride: u32,
}

/// Largest width or height accepted: caps hold them as signed 32-bit
/// integers.
const MAX_DIMENSION: u32 = i32::MAX as u32;

/// The most bytes a frame may have (about 128 PiB on a 64-bit machine): a
/// ring of the most slots a channel has, each holding one such frame,
/// stays within what one mapping of memory spans. A layout of a larger
/// frame is refused where it is made, never when its slots are allocated.
pub const MAX_FRAME_SIZE: usize = cudaipc_transport::MAX_SLOT_SIZE;

/// A frame's format, size and memory layout: what a channel's caps and
/// each frame's metadata say about the frame, in the elements' terms.
///
/// [`VideoLayout::new`] gives GStreamer's default layout for the format,
/// the one `rscudaipcsink` publishes in and `rscudaipcsrc` assumes when a frame
/// says nothing else. Other strides and offsets are given with
/// [`VideoLayout::with_strides`] or [`VideoLayout::with_planes`] and
/// checked: every row of every plane must lie inside the frame.
///
/// ```
/// use cudaipc::{VideoFormat, VideoLayout};
///
/// let rgb = VideoLayout::new(VideoFormat::Rgb, 640, 480)?;
/// assert_eq!(rgb.planes()[0].stride, 1920);
/// assert_eq!(rgb.frame_size(), 640 * 480 * 3);
///
/// // Rows padded to 2048 bytes.
/// let padded = VideoLayout::with_strides(VideoFormat::Rgb, 640, 480, &[2048])?;
/// assert_eq!(padded.frame_size(), 2048 * 480);
///
/// // A stride below the row's 1920 bytes is refused.
/// assert!(VideoLayout::with_strides(VideoFormat::Rgb, 640, 480, &[1000]).is_err());
/// # Ok::<(), cudaipc::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct VideoLayout {
    format: VideoFormat,
    width: u32,
    height: u32,
    /// The format's planes first, the rest zero: held inline, so that a
    /// layout is copied with each frame without an allocation.
    planes: [Plane; MAX_PLANES],
    frame_size: usize,
    framerate: (u32, u32),
}

/// The most planes a format has (I420).
const MAX_PLANES: usize = 3;

impl std::fmt::Debug for VideoLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VideoLayout")
            .field("format", &self.format)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("planes", &self.planes())
            .field("frame_size", &self.frame_size)
            .field("framerate", &self.framerate)
            .finish()
    }
}

impl VideoLayout {
    /// GStreamer's default layout of a `width` x `height` frame of
    /// `format`: planes one after the other, each row padded to a multiple
    /// of 4 bytes (tight whenever the row's byte count is one already, as
    /// for RGBA, or RGB and GRAY8 at a width that is a multiple of 4).
    pub fn new(format: VideoFormat, width: u32, height: u32) -> Result<Self, Error> {
        check_dimensions(width, height)?;
        let round4 = |n: u64| n.next_multiple_of(4);
        let (w, h) = (u64::from(width), u64::from(height));
        // GStreamer's video-info.c: chroma planes start after a luma plane
        // of an even row count.
        let luma_rows = h.next_multiple_of(2);
        let planes: Vec<(u64, u64)> = match format {
            VideoFormat::Rgb => vec![(0, round4(w * 3))],
            VideoFormat::Rgba | VideoFormat::Bgra | VideoFormat::Rgbx | VideoFormat::Bgrx => {
                vec![(0, w * 4)]
            }
            VideoFormat::Gray8 => vec![(0, round4(w))],
            VideoFormat::Nv12 => {
                let stride = round4(w);
                vec![(0, stride), (stride * luma_rows, stride)]
            }
            VideoFormat::I420 => {
                let luma = round4(w);
                let chroma = round4(w.div_ceil(2));
                let u = luma * luma_rows;
                let v = u + chroma * (luma_rows / 2);
                vec![(0, luma), (u, chroma), (v, chroma)]
            }
        };
        let planes = planes
            .into_iter()
            .map(|(offset, stride)| {
                let stride = u32::try_from(stride)
                    .map_err(|_| Error::InvalidLayout(format!("{width} pixels is too wide")))?;
                Ok(Plane { offset, stride })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        // Checked: a stride of 2^33 bytes (RGBA at the widest) times
        // 2^31 rows wraps a u64.
        let (last, last_rows) = match format {
            VideoFormat::Nv12 => (planes[1], luma_rows / 2),
            VideoFormat::I420 => (planes[2], luma_rows / 2),
            _ => (planes[0], h),
        };
        let size = u64::from(last.stride)
            .checked_mul(last_rows)
            .and_then(|bytes| bytes.checked_add(last.offset))
            .ok_or_else(|| {
                Error::InvalidLayout(format!(
                    "a {width}x{height} frame of {format} overflows 64 bits"
                ))
            })?;
        Self::with_planes(format, width, height, &planes, to_usize(size)?)
    }

    /// A layout with the given stride of each plane (in bytes), the planes
    /// one after the other without gaps; the frame ends with the last
    /// plane.
    pub fn with_strides(
        format: VideoFormat,
        width: u32,
        height: u32,
        strides: &[u32],
    ) -> Result<Self, Error> {
        check_dimensions(width, height)?;
        let mut offset = 0u64;
        let mut planes = Vec::with_capacity(strides.len());
        for (p, &stride) in strides.iter().enumerate() {
            planes.push(Plane { offset, stride });
            offset = u64::from(stride)
                .checked_mul(format.rows(p, height))
                .and_then(|bytes| offset.checked_add(bytes))
                .ok_or_else(|| Error::InvalidLayout("the layout overflows".into()))?;
        }
        Self::with_planes(format, width, height, &planes, to_usize(offset)?)
    }

    /// A layout with each plane's offset and stride given, in a frame of
    /// `frame_size` bytes. Refused unless there is one plane per plane of
    /// the format, every stride is at least the row's pixel bytes and
    /// every row lies inside the frame.
    pub fn with_planes(
        format: VideoFormat,
        width: u32,
        height: u32,
        planes: &[Plane],
        frame_size: usize,
    ) -> Result<Self, Error> {
        check_dimensions(width, height)?;
        if frame_size > MAX_FRAME_SIZE {
            return Err(Error::InvalidLayout(format!(
                "frame_size is {frame_size} bytes ({width}x{height} {format}), above the most a frame may have: {MAX_FRAME_SIZE} bytes (a ring of {} such slots must fit in memory)",
                cudaipc_channel::layout::MAX_SLOTS
            )));
        }
        if planes.len() != format.plane_count() {
            return Err(Error::InvalidLayout(format!(
                "{} planes given; {format} has {}",
                planes.len(),
                format.plane_count()
            )));
        }
        for (p, plane) in planes.iter().enumerate() {
            let row = format.row_bytes(p, width);
            if u64::from(plane.stride) < row {
                return Err(Error::InvalidLayout(format!(
                    "plane {p}: stride {} is below the row's {row} bytes ({width} pixels of {format})",
                    plane.stride
                )));
            }
            let end = (format.rows(p, height) - 1)
                .checked_mul(u64::from(plane.stride))
                .and_then(|rows| rows.checked_add(plane.offset))
                .and_then(|start| start.checked_add(row))
                .ok_or_else(|| Error::InvalidLayout(format!("plane {p}: the layout overflows")))?;
            if end > frame_size as u64 {
                return Err(Error::InvalidLayout(format!(
                    "plane {p} ends at byte {end}, beyond the frame of {frame_size} bytes"
                )));
            }
        }
        let mut inline = [Plane {
            offset: 0,
            stride: 0,
        }; MAX_PLANES];
        inline[..planes.len()].copy_from_slice(planes);
        Ok(Self {
            format,
            width,
            height,
            planes: inline,
            frame_size,
            framerate: (0, 1),
        })
    }

    /// The same layout with a frame rate in the caps (`numerator /
    /// denominator` frames per second; the default 0/1 means a variable
    /// rate). Only consumers' negotiation sees it; frames are paced by
    /// their publisher.
    pub fn with_framerate(mut self, numerator: u32, denominator: u32) -> Result<Self, Error> {
        if denominator == 0 || numerator > i32::MAX as u32 || denominator > i32::MAX as u32 {
            return Err(Error::InvalidLayout(format!(
                "frame rate {numerator}/{denominator} is not a valid fraction"
            )));
        }
        self.framerate = (numerator, denominator);
        Ok(self)
    }

    /// The pixel format.
    pub fn format(&self) -> VideoFormat {
        self.format
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Offset and stride of each plane, in plane order.
    pub fn planes(&self) -> &[Plane] {
        &self.planes[..self.format.plane_count()]
    }

    /// Bytes of one frame: what [`Publisher::publish`](crate::Publisher::publish)
    /// takes and what [`Frame::host_bytes`](crate::Frame::host_bytes) gives.
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// [`Error::FrameSize`] unless `given` bytes are one frame.
    pub(crate) fn expect_frame_bytes(&self, given: usize) -> Result<(), Error> {
        match given == self.frame_size {
            true => Ok(()),
            false => Err(Error::FrameSize {
                expected: self.frame_size,
                given,
            }),
        }
    }

    /// The frame rate in the caps, as (numerator, denominator).
    pub fn framerate(&self) -> (u32, u32) {
        self.framerate
    }

    /// The caps string a publisher announces for this layout, as
    /// `rscudaipcsink` writes it: `video/x-raw` with format, width, height
    /// and frame rate. Strides and offsets travel with each frame instead.
    ///
    /// ```
    /// # use cudaipc::{VideoFormat, VideoLayout};
    /// let layout = VideoLayout::new(VideoFormat::Nv12, 1920, 1080)?;
    /// assert_eq!(
    ///     layout.caps(),
    ///     "video/x-raw, format=(string)NV12, width=(int)1920, height=(int)1080, framerate=(fraction)0/1"
    /// );
    /// # Ok::<(), cudaipc::Error>(())
    /// ```
    pub fn caps(&self) -> String {
        format!(
            "video/x-raw, format=(string){}, width=(int){}, height=(int){}, framerate=(fraction){}/{}",
            self.format, self.width, self.height, self.framerate.0, self.framerate.1
        )
    }

    /// The default layout ([`VideoLayout::new`]) of the frames of a caps
    /// string a publisher announced (`rscudaipcsink` writes every field of
    /// GStreamer's caps; format, width, height and frame rate are read).
    ///
    /// ```
    /// # use cudaipc::{VideoFormat, VideoLayout};
    /// let caps = "video/x-raw, format=(string)RGB, width=(int)320, height=(int)240, \
    ///             framerate=(fraction)30/1, pixel-aspect-ratio=(fraction)1/1";
    /// let layout = VideoLayout::from_caps(caps)?;
    /// assert_eq!((layout.format(), layout.width(), layout.height()), (VideoFormat::Rgb, 320, 240));
    /// assert_eq!(layout.framerate(), (30, 1));
    /// assert!(VideoLayout::from_caps("audio/x-raw, rate=(int)48000").is_err());
    /// # Ok::<(), cudaipc::Error>(())
    /// ```
    pub fn from_caps(caps: &str) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidCaps {
            caps: caps.to_owned(),
            reason,
        };
        let mut fields = split_fields(caps).into_iter();
        let media = fields.next().unwrap_or_default();
        // A memory feature (`video/x-raw(memory:CUDAMemory)`) does not
        // change the layout.
        let media_type = media.split('(').next().unwrap_or_default().trim();
        if media_type != "video/x-raw" {
            return Err(invalid(format!(
                "media type '{media_type}', not video/x-raw"
            )));
        }
        let (mut format, mut width, mut height, mut framerate) = (None, None, None, None);
        for field in fields {
            let Some((name, value)) = field.split_once('=') else {
                return Err(invalid(format!("field '{}' has no value", field.trim())));
            };
            let value = strip_type(value.trim());
            match name.trim() {
                "format" => format = Some(value.trim_matches('"').parse::<VideoFormat>()?),
                "width" => width = Some(parse_int(value).ok_or_else(|| invalid("width".into()))?),
                "height" => {
                    height = Some(parse_int(value).ok_or_else(|| invalid("height".into()))?)
                }
                "framerate" => {
                    framerate = Some(
                        value
                            .split_once('/')
                            .and_then(|(n, d)| Some((parse_int(n)?, parse_int(d)?)))
                            .ok_or_else(|| invalid(format!("framerate '{value}'")))?,
                    )
                }
                _ => {}
            }
        }
        let missing = |field: &str| invalid(format!("no fixed {field}"));
        let layout = Self::new(
            format.ok_or_else(|| missing("format"))?,
            width.ok_or_else(|| missing("width"))?,
            height.ok_or_else(|| missing("height"))?,
        )?;
        match framerate {
            Some((n, d)) => layout.with_framerate(n, d),
            None => Ok(layout),
        }
    }

    /// (offset, stride) of each plane, as the channel's frame metadata
    /// carries them.
    pub(crate) fn wire_planes(&self) -> Vec<(u64, u32)> {
        self.planes().iter().map(|p| (p.offset, p.stride)).collect()
    }

    /// This layout's format and size with the planes a frame carries
    /// (`None` where they do not fit in `frame_size` bytes).
    pub(crate) fn with_wire_planes(
        &self,
        planes: &[(u64, u32)],
        frame_size: usize,
    ) -> Option<Self> {
        if planes.len() > MAX_PLANES {
            return None;
        }
        let mut inline = [Plane {
            offset: 0,
            stride: 0,
        }; MAX_PLANES];
        for (plane, &(offset, stride)) in inline.iter_mut().zip(planes) {
            *plane = Plane { offset, stride };
        }
        let planes = &inline[..planes.len()];
        Self::with_planes(self.format, self.width, self.height, planes, frame_size)
            .ok()
            .map(|layout| Self {
                framerate: self.framerate,
                ..layout
            })
    }
}

fn check_dimensions(width: u32, height: u32) -> Result<(), Error> {
    if width == 0 || height == 0 || width > MAX_DIMENSION || height > MAX_DIMENSION {
        return Err(Error::InvalidLayout(format!(
            "{width}x{height}: width and height must be between 1 and {MAX_DIMENSION}"
        )));
    }
    Ok(())
}

fn to_usize(size: u64) -> Result<usize, Error> {
    usize::try_from(size)
        .map_err(|_| Error::InvalidLayout(format!("a frame of {size} bytes is too large")))
}

/// The comma-separated parts of a caps string, commas inside quotes or
/// brackets left alone.
fn split_fields(caps: &str) -> Vec<&str> {
    let (mut fields, mut start, mut depth, mut quoted) = (Vec::new(), 0, 0i32, false);
    for (i, c) in caps.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '[' | '{' | '<' if !quoted => depth += 1,
            ')' | ']' | '}' | '>' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                fields.push(&caps[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    fields.push(&caps[start..]);
    fields
}

/// A field's value without its `(type)` prefix.
fn strip_type(value: &str) -> &str {
    match value
        .strip_prefix('(')
        .and_then(|rest| rest.split_once(')'))
    {
        Some((_, rest)) => rest.trim(),
        None => value,
    }
}

fn parse_int(value: &str) -> Option<u32> {
    value.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes GStreamer's `VideoInfo` gives (gst-video 1.22), including odd
    /// sizes where rows are padded.
    #[test]
    fn default_layouts_match_gstreamer() {
        /// Format, width, height, (offset, stride) per plane, frame size.
        type Case = (VideoFormat, u32, u32, &'static [(u64, u32)], usize);
        let cases: [Case; 8] = [
            (VideoFormat::Rgb, 3840, 2160, &[(0, 11520)], 24_883_200),
            (VideoFormat::Rgb, 30, 7, &[(0, 92)], 644),
            (VideoFormat::Rgba, 31, 3, &[(0, 124)], 372),
            (VideoFormat::Gray8, 30, 5, &[(0, 32)], 160),
            (VideoFormat::Nv12, 64, 48, &[(0, 64), (3072, 64)], 4608),
            (VideoFormat::Nv12, 30, 5, &[(0, 32), (192, 32)], 288),
            (
                VideoFormat::I420,
                64,
                48,
                &[(0, 64), (3072, 32), (3840, 32)],
                4608,
            ),
            (
                VideoFormat::I420,
                30,
                5,
                &[(0, 32), (192, 16), (240, 16)],
                288,
            ),
        ];
        for (format, width, height, planes, size) in cases {
            let layout = VideoLayout::new(format, width, height).unwrap();
            assert_eq!(layout.wire_planes(), planes, "{format} {width}x{height}");
            assert_eq!(layout.frame_size(), size, "{format} {width}x{height}");
        }
    }

    #[test]
    fn strides_below_the_row_or_planes_outside_the_frame_are_refused() {
        let err = VideoLayout::with_strides(VideoFormat::Rgb, 64, 48, &[191]).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidLayout(why) if why.contains("stride 191")),
            "{err}"
        );
        assert!(VideoLayout::with_strides(VideoFormat::Nv12, 64, 48, &[64]).is_err());
        assert!(VideoLayout::with_strides(VideoFormat::Nv12, 64, 48, &[64, 63]).is_err());
        let planes = [Plane {
            offset: 1,
            stride: 192,
        }];
        let err =
            VideoLayout::with_planes(VideoFormat::Rgb, 64, 48, &planes, 192 * 48).unwrap_err();
        assert!(matches!(err, Error::InvalidLayout(_)), "{err}");
        assert!(VideoLayout::with_planes(VideoFormat::Rgb, 64, 48, &planes, 192 * 48 + 1).is_ok());
        for (w, h) in [(0, 48), (64, 0), (u32::MAX, 1)] {
            assert!(VideoLayout::new(VideoFormat::Rgb, w, h).is_err(), "{w}x{h}");
        }
    }

    #[test]
    fn caps_written_are_read_back() {
        for format in VideoFormat::ALL {
            let layout = VideoLayout::new(format, 322, 242)
                .unwrap()
                .with_framerate(30000, 1001)
                .unwrap();
            assert_eq!(VideoLayout::from_caps(&layout.caps()).unwrap(), layout);
        }
    }

    #[test]
    fn caps_of_a_sink_are_read() {
        let caps = "video/x-raw, format=(string)I420, width=(int)64, height=(int)48, \
                    interlace-mode=(string)progressive, multiview-mode=(string)mono, \
                    multiview-flags=(GstVideoMultiviewFlagsSet)0:ffffffff:/right-view-first/left-flipped/left-flopped/right-flipped/right-flopped/half-aspect/mixed-mono, \
                    pixel-aspect-ratio=(fraction)1/1, framerate=(fraction)25/1";
        let layout = VideoLayout::from_caps(caps).unwrap();
        assert_eq!(
            layout,
            VideoLayout::new(VideoFormat::I420, 64, 48)
                .unwrap()
                .with_framerate(25, 1)
                .unwrap()
        );
    }

    #[test]
    fn unusable_caps_are_errors() {
        for caps in [
            "",
            "video/x-raw",
            "video/x-raw, format=(string)RGB, width=(int)64",
            "video/x-raw, format=(string)YUY2, width=(int)64, height=(int)48",
            "video/x-raw, format=(string)RGB, width=(int)[ 1, 100 ], height=(int)48",
            "video/x-raw, format=(string)RGB, width=(int)-4, height=(int)48",
            "video/x-raw, format=(string)RGB, width=(int)64, height=(int)48, framerate=(fraction)1/0",
            "image/jpeg, width=(int)64, height=(int)48",
        ] {
            assert!(VideoLayout::from_caps(caps).is_err(), "{caps}");
        }
    }
}
