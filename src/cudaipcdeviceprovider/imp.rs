// SPDX-License-Identifier: MPL-2.0

use std::sync::LazyLock;
use std::sync::OnceLock;

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;

use cudaipc_channel::directory::{self, ChannelEntry, ChannelState};

pub(crate) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "cudaipcdeviceprovider",
        gst::DebugColorFlags::empty(),
        Some("cudaipc channel discovery"),
    )
});

#[derive(Default)]
pub struct CudaIpcDeviceProvider;

#[glib::object_subclass]
impl ObjectSubclass for CudaIpcDeviceProvider {
    const NAME: &'static str = "GstRsCudaIpcDeviceProvider";
    type Type = super::CudaIpcDeviceProvider;
    type ParentType = gst::DeviceProvider;
}

impl ObjectImpl for CudaIpcDeviceProvider {}
impl GstObjectImpl for CudaIpcDeviceProvider {}

impl DeviceProviderImpl for CudaIpcDeviceProvider {
    fn metadata() -> Option<&'static gst::subclass::DeviceProviderMetadata> {
        static METADATA: LazyLock<gst::subclass::DeviceProviderMetadata> = LazyLock::new(|| {
            gst::subclass::DeviceProviderMetadata::new(
                "CUDA IPC channel provider",
                super::DEVICE_CLASS,
                "Lists the live rscudaipcsink channels of this host",
                env!("CARGO_PKG_AUTHORS"),
            )
        });
        Some(&*METADATA)
    }

    fn probe(&self) -> Vec<gst::Device> {
        directory::list_channels()
            .into_iter()
            .filter(|c| c.state == ChannelState::Live)
            .map(|c| device_for(&c).upcast())
            .collect()
    }

    /// A snapshot: channels that appear later show on the next start or
    /// probe (nothing watches the shm folder). Implemented because
    /// GstDeviceProvider probes by itself only for providers without one.
    fn start(&self) -> Result<(), gst::LoggableError> {
        let obj = self.obj();
        for device in self.probe() {
            obj.device_add(&device);
        }
        Ok(())
    }

    // No `stop`: GstDeviceProvider drops the devices itself, with its
    // object lock held (asking for them there would deadlock).
}

fn device_for(channel: &ChannelEntry) -> super::CudaIpcDevice {
    let caps = channel
        .caps
        .as_deref()
        .and_then(|caps| caps.parse::<gst::Caps>().ok())
        .unwrap_or_else(gst::Caps::new_any);
    let properties = gst::Structure::builder("cudaipc-channel")
        .field("channel", &channel.name)
        .field("producer-pid", channel.producer_pid)
        // The owner of the control block: the user who made the channel.
        .field("producer-uid", channel.owner_uid.map_or(-1i64, i64::from))
        .field("transport", channel.transport)
        .field("consumers", channel.consumers)
        .field("slots", channel.slot_count)
        .field("slot-size", channel.slot_size)
        .field("path", channel.path.display().to_string())
        .build();
    let device: super::CudaIpcDevice = glib::Object::builder()
        .property("display-name", format!("cudaipc channel {}", channel.name))
        .property("device-class", super::DEVICE_CLASS)
        .property("caps", &caps)
        .property("properties", &properties)
        .build();
    let _ = device.imp().channel.set(channel.name.clone());
    gst::debug!(CAT, "found channel {}", channel.name);
    device
}

#[derive(Default)]
pub struct CudaIpcDevice {
    channel: OnceLock<String>,
}

#[glib::object_subclass]
impl ObjectSubclass for CudaIpcDevice {
    const NAME: &'static str = "GstRsCudaIpcDevice";
    type Type = super::CudaIpcDevice;
    type ParentType = gst::Device;
}

impl ObjectImpl for CudaIpcDevice {}
impl GstObjectImpl for CudaIpcDevice {}

impl DeviceImpl for CudaIpcDevice {
    fn create_element(&self, name: Option<&str>) -> Result<gst::Element, gst::LoggableError> {
        let channel = self
            .channel
            .get()
            .ok_or_else(|| gst::loggable_error!(CAT, "device without a channel"))?;
        // `rscudaipcsrc`: always this plugin's source, whichever plugin
        // owns the plain name.
        gst::ElementFactory::make("rscudaipcsrc")
            .name_if_some(name)
            .property("channel", channel)
            .build()
            .map_err(|e| gst::loggable_error!(CAT, "cannot create rscudaipcsrc: {e}"))
    }
}
