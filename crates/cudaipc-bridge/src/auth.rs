// SPDX-License-Identifier: MPL-2.0

//! Who may send to a receiver: addresses it was told (`--allow`), and a
//! shared secret proved on a fresh challenge (`--secret-file`), never sent.

use std::net::IpAddr;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::wire::NONCE;

/// A shared secret, read from a file only its owner may read.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn read(path: &Path) -> Result<Self, String> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path)
            .map_err(|e| format!("cannot read the secret file {}: {e}", path.display()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!(
                "the secret file {} may be read by others (mode {:o}): chmod 600 it",
                path.display(),
                meta.permissions().mode() & 0o777
            ));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read the secret file {}: {e}", path.display()))?;
        let secret = bytes.trim_ascii().to_vec();
        if secret.len() < 16 {
            return Err(format!(
                "the secret in {} is shorter than 16 bytes: use e.g. `head -c 32 /dev/urandom | base64 > FILE`",
                path.display()
            ));
        }
        Ok(Self(secret))
    }

    /// The proof of this secret on `nonce`.
    pub fn prove(&self, nonce: &[u8; NONCE]) -> [u8; NONCE] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        mac.update(b"cudaipc-bridge v1");
        mac.update(nonce);
        mac.finalize().into_bytes().into()
    }

    /// Whether `proof` proves this secret on `nonce` (in constant time).
    pub fn verify(&self, nonce: &[u8; NONCE], proof: &[u8; NONCE]) -> bool {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        mac.update(b"cudaipc-bridge v1");
        mac.update(nonce);
        mac.verify_slice(proof).is_ok()
    }
}

/// A fresh challenge.
pub fn nonce() -> Result<[u8; NONCE], String> {
    let mut nonce = [0u8; NONCE];
    let mut filled = 0;
    while filled < NONCE {
        match rustix::rand::getrandom(&mut nonce[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("the kernel gives no random numbers: {e}")),
        }
    }
    Ok(nonce)
}

/// The senders a receiver accepts.
#[derive(Clone, Default)]
pub struct Admission {
    /// Accepted addresses; empty: any address (then a secret is needed).
    pub allow: Vec<IpAddr>,
    pub secret: Option<Secret>,
}

impl Admission {
    /// Why a sender at `address` is refused before its hello.
    pub fn refuse_address(&self, address: Option<IpAddr>) -> Option<String> {
        if self.allow.is_empty() {
            return None;
        }
        match address {
            Some(ip) if self.allow.contains(&ip) => None,
            Some(ip) => Some(format!("{ip} is not in --allow")),
            None => Some("a sender whose address UCX does not give".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_verifies_only_for_its_secret_and_nonce() {
        let secret = Secret(b"0123456789abcdef0123".to_vec());
        let other = Secret(b"0123456789abcdef0124".to_vec());
        let (a, b) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(a, b, "two challenges are different");
        let proof = secret.prove(&a);
        assert!(secret.verify(&a, &proof));
        assert!(!secret.verify(&b, &proof), "a replayed proof");
        assert!(!other.verify(&a, &proof), "another secret");
        assert!(!secret.verify(&a, &[0; NONCE]));
    }

    #[test]
    fn addresses_outside_the_list_are_refused() {
        let admission = Admission {
            allow: vec!["10.0.0.1".parse().unwrap()],
            secret: None,
        };
        assert_eq!(
            admission.refuse_address(Some("10.0.0.1".parse().unwrap())),
            None
        );
        assert!(
            admission
                .refuse_address(Some("10.0.0.2".parse().unwrap()))
                .is_some()
        );
        assert!(admission.refuse_address(None).is_some());
    }
}
