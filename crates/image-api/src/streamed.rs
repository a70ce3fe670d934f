//! What both image stores share: which of an image's data ([`Slot`]),
//! the hashes computed as data streams by ([`Hasher`]), and the refusal
//! of data past the size cap.

use axum::http::StatusCode;
use berth_compute_model::ImageHashes;
use berth_http::ApiError;
use md5::Md5;
use sha2::{Digest, Sha512};

/// Which of an image's data: what it serves, or what waits for its
/// import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Data,
    Staged,
}

/// MD5 and SHA-512 of data as it streams by (Glance's `checksum` and
/// `os_hash_value`).
#[derive(Default)]
pub(crate) struct Hasher {
    md5: Md5,
    sha512: Sha512,
}

impl Hasher {
    pub(crate) fn update(&mut self, data: &[u8]) {
        self.md5.update(data);
        self.sha512.update(data);
    }

    pub(crate) fn finish(self) -> ImageHashes {
        ImageHashes {
            checksum: hex(&self.md5.finalize()),
            os_hash_algo: "sha512".to_owned(),
            os_hash_value: hex(&self.sha512.finalize()),
        }
    }
}

pub(crate) fn too_large() -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "The incoming image is too large: The provided image is too large.")
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
