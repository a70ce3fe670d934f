//! Key material for `os-keypairs`, as Nova's `nova/crypto.py` handles it:
//! an imported OpenSSH public key is parsed and fingerprinted (MD5 of the
//! key blob, colon-separated hex), an imported X.509 certificate is
//! parsed and fingerprinted (SHA-1 of its DER), and a key pair asked for
//! without a public key is generated here.
//!
//! Generation is a deliberate difference: Nova generates RSA-2048 keys
//! with paramiko and (for `x509`) an RSA certificate with the `openssl`
//! binary; berth generates **Ed25519** with `ring` (already in the build
//! through rustls), which cannot generate RSA. The private key of an
//! `ssh` pair is an OpenSSH private key; an `x509` pair is a self-signed
//! Ed25519 certificate for `CN=<user>` whose private key is returned as a
//! base64 PKCS#8 (v1) document (Nova: a base64 PKCS#12 bundle). Tempest's
//! keypair tests check names, types and that `private_key` is returned,
//! not the algorithm (see docs/COMPUTE.md).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use md5::{Digest as _, Md5};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair as _};

/// Why imported key material was refused: Nova's `InvalidKeypair` reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidKey(pub String);

/// Colon-separated lowercase hex, as Nova prints fingerprints.
fn colon_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// A reader of the SSH wire encoding (RFC 4251 `string`s and `mpint`s).
struct Wire<'a>(&'a [u8]);

impl<'a> Wire<'a> {
    fn string(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_be_bytes(self.0.get(..4)?.try_into().ok()?) as usize;
        let value = self.0.get(4..4usize.checked_add(len)?)?;
        self.0 = &self.0[4 + len..];
        Some(value)
    }

    /// A positive integer (an `mpint` with its sign bit clear, not zero).
    fn positive_mpint(&mut self) -> Option<()> {
        let value = self.string()?;
        (value.first().is_some_and(|b| b & 0x80 == 0) && value.iter().any(|b| *b != 0)).then_some(())
    }
}

/// Does `blob` hold a well-formed public key of `key_type`?
fn ssh_blob_ok(key_type: &str, blob: &[u8]) -> Option<()> {
    let mut wire = Wire(blob);
    if wire.string()? != key_type.as_bytes() {
        return None;
    }
    match key_type {
        "ssh-rsa" => {
            wire.positive_mpint()?; // e
            wire.positive_mpint()?; // n
        }
        "ssh-dss" => {
            for _ in 0..4 {
                wire.positive_mpint()?; // p, q, g, y
            }
        }
        "ssh-ed25519" => {
            if wire.string()?.len() != 32 {
                return None;
            }
        }
        "ecdsa-sha2-nistp256" | "ecdsa-sha2-nistp384" | "ecdsa-sha2-nistp521" => {
            let curve = &key_type["ecdsa-sha2-".len()..];
            if wire.string()? != curve.as_bytes() {
                return None;
            }
            let coordinate = match curve {
                "nistp256" => 32,
                "nistp384" => 48,
                _ => 66,
            };
            let point = wire.string()?;
            let ok = match point.first()? {
                4 => point.len() == 1 + 2 * coordinate,
                2 | 3 => point.len() == 1 + coordinate,
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        _ => return None,
    }
    wire.0.is_empty().then_some(())
}

/// The fingerprint of an OpenSSH public key line `type base64 [comment]`
/// (Nova's `generate_fingerprint`): refuses anything that is not a
/// well-formed RSA, DSA, Ed25519 or ECDSA (P-256/384/521) public key.
pub fn ssh_fingerprint(public_key: &str) -> Result<String, InvalidKey> {
    let invalid = || InvalidKey("failed to generate fingerprint".into());
    let mut parts = public_key.split(' ');
    let key_type = parts.next().unwrap_or("");
    let encoded = parts.next().ok_or_else(invalid)?;
    let blob = B64.decode(encoded.trim_end_matches(['\r', '\n'])).map_err(|_| invalid())?;
    ssh_blob_ok(key_type, &blob).ok_or_else(invalid)?;
    Ok(colon_hex(&Md5::digest(&blob)))
}

/// A DER element: `(tag, contents, rest)`.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *input.first()?;
    let first = *input.get(1)?;
    let (len, header) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for b in input.get(2..2 + n)? {
            len = (len << 8) | *b as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    Some((tag, input.get(header..end)?, &input[end..]))
}

/// Is `der` shaped as an X.509 certificate: one SEQUENCE of a
/// `tbsCertificate` SEQUENCE, a `signatureAlgorithm` SEQUENCE and a
/// `signatureValue` BIT STRING, and nothing after it?
fn certificate_shape_ok(der: &[u8]) -> bool {
    let Some((0x30, body, [])) = der_element(der) else { return false };
    let Some((0x30, tbs, rest)) = der_element(body) else { return false };
    let Some((0x30, _, rest)) = der_element(rest) else { return false };
    let Some((0x03, _, [])) = der_element(rest) else { return false };
    // The tbsCertificate starts with the version ([0]) or the serial.
    matches!(der_element(tbs), Some((0xa0 | 0x02, _, _)))
}

/// The fingerprint of a PEM X.509 certificate (Nova's
/// `generate_x509_fingerprint`): SHA-1 of its DER, colon-separated hex.
pub fn x509_fingerprint(pem: &str) -> Result<String, InvalidKey> {
    let invalid = |why: &str| {
        InvalidKey(format!("failed to generate X509 fingerprint. Error message: Unable to load PEM file: {why}"))
    };
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = pem.find(BEGIN).ok_or_else(|| invalid("no certificate"))? + BEGIN.len();
    let stop = pem[start..].find(END).ok_or_else(|| invalid("no end of certificate"))? + start;
    let encoded: String = pem[start..stop].chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = B64.decode(encoded).map_err(|_| invalid("bad base64"))?;
    if !certificate_shape_ok(&der) {
        return Err(invalid("not a certificate"));
    }
    Ok(colon_hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &der).as_ref()))
}

/// A generated key pair: `(private_key, public_key, fingerprint)`.
pub type Generated = (String, String, String);

/// What `ring`'s PKCS#8 v2 document holds between its outer SEQUENCE
/// header and an Ed25519 seed: the version, the algorithm and the
/// private key's OCTET STRING headers.
const PKCS8_SEED_PREFIX: [u8; 14] =
    [0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// A fresh Ed25519 key: `(pkcs8 document, seed, public key)`.
type Ed25519Parts = (Vec<u8>, [u8; 32], [u8; 32]);

/// Generate an Ed25519 key with `ring` and read its seed back out.
fn ed25519() -> Result<Ed25519Parts, String> {
    let rng = SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| "no randomness".to_owned())?;
    let doc = pkcs8.as_ref().to_vec();
    let pair = Ed25519KeyPair::from_pkcs8(&doc).map_err(|_| "bad generated key".to_owned())?;
    if doc.get(2..16) != Some(&PKCS8_SEED_PREFIX[..]) {
        return Err("unexpected PKCS#8 layout".into());
    }
    let seed: [u8; 32] = doc[16..48].try_into().map_err(|_| "short PKCS#8".to_owned())?;
    let public: [u8; 32] = pair.public_key().as_ref().try_into().map_err(|_| "bad public key".to_owned())?;
    // The seed read out of the document must give the same key.
    let again = Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| "bad seed".to_owned())?;
    if again.public_key().as_ref() != public {
        return Err("unexpected PKCS#8 layout".into());
    }
    Ok((doc, seed, public))
}

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn pem_lines(label: &str, der: &[u8], width: usize) -> String {
    let encoded = B64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in encoded.as_bytes().chunks(width) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Generate an `ssh` key pair: an Ed25519 OpenSSH private key, its public
/// key line (`ssh-ed25519 … Generated-by-Nova`, Nova's comment) and its
/// fingerprint.
pub fn generate_ssh() -> Result<Generated, String> {
    let (_, seed, public) = ed25519()?;
    let mut blob = Vec::new();
    put_string(&mut blob, b"ssh-ed25519");
    put_string(&mut blob, &public);
    let comment = "Generated-by-Nova";
    let mut check = [0u8; 4];
    SystemRandom::new().fill(&mut check).map_err(|_| "no randomness".to_owned())?;
    let mut private = Vec::new();
    private.extend_from_slice(&check);
    private.extend_from_slice(&check);
    put_string(&mut private, b"ssh-ed25519");
    put_string(&mut private, &public);
    let mut secret = seed.to_vec();
    secret.extend_from_slice(&public);
    put_string(&mut private, &secret);
    put_string(&mut private, comment.as_bytes());
    let mut pad = 1u8;
    while private.len() % 8 != 0 {
        private.push(pad);
        pad += 1;
    }
    let mut file = b"openssh-key-v1\0".to_vec();
    put_string(&mut file, b"none");
    put_string(&mut file, b"none");
    put_string(&mut file, b"");
    file.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut file, &blob);
    put_string(&mut file, &private);
    let public_key = format!("ssh-ed25519 {} {comment}", B64.encode(&blob));
    let fingerprint = colon_hex(&Md5::digest(&blob));
    Ok((pem_lines("OPENSSH PRIVATE KEY", &file, 70), public_key, fingerprint))
}

/// DER: `tag`, length, `contents`.
fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = contents.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().iter().copied().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(contents);
    out
}

fn seq(parts: &[&[u8]]) -> Vec<u8> {
    der(0x30, &parts.concat())
}

/// `YYMMDDHHMMSSZ` of an ISO time `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_time(iso: &str) -> Vec<u8> {
    let digits: String = iso.chars().filter(char::is_ascii_digit).collect();
    der(0x17, format!("{}Z", &digits[2..]).as_bytes())
}

/// Generate an `x509` key pair for `user_id`: a self-signed Ed25519
/// certificate for `CN=<user_id>` valid ten years from `now`, its
/// private key (base64 PKCS#8 v1) and its fingerprint.
pub fn generate_x509(user_id: &str, now: i64) -> Result<Generated, String> {
    let (pkcs8, seed, public) = ed25519()?;
    let pair = Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| "bad generated key".to_owned())?;
    // The private key handed out is PKCS#8 v1 (RFC 8410: version 0, the
    // algorithm, the seed), which OpenSSL reads; ring's v2 document also
    // carries the public key, which OpenSSL 3.0 refuses.
    let private_v1 = seq(&[&der(0x02, &[0]), &seq(&[&der(0x06, &[0x2b, 0x65, 0x70])]), &der(0x04, &der(0x04, &seed))]);
    let ed25519_oid = der(0x06, &[0x2b, 0x65, 0x70]);
    let algorithm = seq(&[&ed25519_oid]);
    let cn = der(0x0c, user_id.as_bytes());
    let name = seq(&[&der(0x31, &seq(&[&der(0x06, &[0x55, 0x04, 0x03]), &cn]))]);
    let not_before = utc_time(&crate::views::isotime(now));
    let not_after = utc_time(&crate::views::isotime(now + 3650 * 86_400));
    let mut serial = [0u8; 16];
    SystemRandom::new().fill(&mut serial).map_err(|_| "no randomness".to_owned())?;
    serial[0] &= 0x7f;
    serial[0] |= 0x01;
    let mut key_bits = vec![0u8];
    key_bits.extend_from_slice(&public);
    let spki = seq(&[&algorithm, &der(0x03, &key_bits)]);
    let version = der(0xa0, &der(0x02, &[2]));
    let tbs = seq(&[&version, &der(0x02, &serial), &algorithm, &name, &seq(&[&not_before, &not_after]), &name, &spki]);
    let mut signature = vec![0u8];
    signature.extend_from_slice(pair.sign(&tbs).as_ref());
    let certificate = seq(&[&tbs, &algorithm, &der(0x03, &signature)]);
    let fingerprint = colon_hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &certificate).as_ref());
    Ok((B64.encode(&private_v1), pem_lines("CERTIFICATE", &certificate, 64), fingerprint))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tempest's `test_keypair_create_with_pub_key` key, and its
    /// fingerprint as Nova computes it (`ssh-keygen -l -E md5` agrees).
    const TEMPEST_RSA: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCsNe3/1ILNCqFyfYWDeTKLD6jEXC2OQHLmietMWW+/vdaZq7KZEwO0jhglaFjU1mpqq4Gz5RX156sCTNM9vRbwKAxfsdF9laBYVsex3m3Wmui3uYrKyumsoJn2g9GNnG1PI1mrVjZ61i0GY3khna+wzlTpCCmy5HNlrmbj3XLqBUpipTOXmsnr4sChzC53KCd8LXuwc1i/CZPvF+3XipvAgFSE53pCtLOeB1kYMOBaiUPLQTWXR3JpckqFIQwhIH0zoHlJvZE8hh90XcPojYN56tI0OlrGqojbediJYD0rUsJu4weZpbn8vilb3JuDY+jwssnSA8wzBx3A/8y9Pp1B nova@ubuntu";

    #[test]
    fn fingerprints_an_rsa_key_as_nova() {
        let fingerprint = ssh_fingerprint(TEMPEST_RSA).unwrap();
        let blob = B64.decode(TEMPEST_RSA.split(' ').nth(1).unwrap()).unwrap();
        assert_eq!(fingerprint, colon_hex(&Md5::digest(&blob)));
        assert_eq!(fingerprint.len(), 47);
    }

    #[test]
    fn refuses_what_nova_refuses() {
        for bad in [
            "ssh-rsa JUNK nova@ubuntu",
            " ",
            "",
            &format!("ssh-rsa {} openstack@ubuntu", "A".repeat(2048)),
            // The blob says ssh-rsa, the line says ed25519.
            &TEMPEST_RSA.replacen("ssh-rsa", "ssh-ed25519", 1),
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA== x",
        ] {
            assert!(ssh_fingerprint(bad).is_err(), "{bad:?}");
        }
        assert!(x509_fingerprint("not a cert").is_err());
        assert!(x509_fingerprint("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    }

    #[test]
    fn generated_keys_import_again_with_the_same_fingerprint() {
        let (private, public, fingerprint) = generate_ssh().unwrap();
        assert!(private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));
        assert!(public.starts_with("ssh-ed25519 ") && public.ends_with(" Generated-by-Nova"));
        assert_eq!(ssh_fingerprint(&public).unwrap(), fingerprint);

        let (private, certificate, fingerprint) = generate_x509("alice", 1_700_000_000).unwrap();
        assert!(B64.decode(private).is_ok());
        assert_eq!(x509_fingerprint(&certificate).unwrap(), fingerprint);
        assert_eq!(fingerprint.len(), 59);
    }
}
