// SPDX-License-Identifier: MPL-2.0

//! `verify=true`: the totals read back from the GPU, and what the first bad
//! frame posts (an element message; an error too with `verify-fatal`).

use gst::subclass::prelude::*;

use super::imp::{CAT, CudaProcess};
use super::settings::Settings;
use super::state::{Posts, State};

impl CudaProcess {
    /// The element message (and, when fatal, the error) for the first bad
    /// frame, once.
    fn verdict(&self, state: &mut State, fatal: bool) -> Posts {
        let report = state.report;
        let Some(first_bad) = report.first_bad.filter(|_| !state.reported) else {
            return Posts::default();
        };
        state.reported = true;
        let description = first_bad.describe();
        gst::warning!(
            CAT,
            imp = self,
            "verification failed: {description} (corrupt {}, missing {})",
            report.corrupt,
            report.missing
        );
        let structure = gst::Structure::builder("cudaprocess-verify")
            .field("frame", first_bad.frame() as i64)
            .field("kind", first_bad.kind())
            .field("corrupt", report.corrupt)
            .field("missing", report.missing)
            .field("description", &description)
            .build();
        let message = gst::message::Element::builder(structure)
            .src(&*self.obj())
            .build();
        let error = fatal.then(|| {
            state.failed = true;
            gst::error_msg!(
                gst::StreamError::Failed,
                ("Frame check failed: {description}"),
                [
                    "{} corrupt and {} missing frame(s) in {} checked",
                    report.corrupt,
                    report.missing,
                    report.frames
                ]
            )
        });
        Posts {
            message: Some(message),
            error,
        }
    }

    /// Synchronises the stream once, reads the final totals and prepares
    /// what to post (EOS, stop).
    pub(super) fn finish(&self, state: &mut State) -> Posts {
        let Some(verifier) = state.verifier.as_ref() else {
            return Posts::default();
        };
        match verifier.exact_report() {
            Ok(report) => state.report = report,
            Err(e) => gst::error!(CAT, imp = self, "cannot read the verification totals: {e}"),
        }
        gst::debug!(CAT, imp = self, "verification totals: {:?}", state.report);
        let fatal = self.settings.lock().unwrap().verify_fatal;
        self.verdict(state, fatal)
    }

    /// Reads the (lagging) totals after a frame; what to post if a frame
    /// went bad.
    pub(super) fn after_frame(&self, state: &mut State, settings: &Settings) -> Posts {
        let Some(verifier) = state.verifier.as_ref() else {
            return Posts::default();
        };
        state.report = verifier.report();
        self.verdict(state, settings.verify_fatal)
    }
}
