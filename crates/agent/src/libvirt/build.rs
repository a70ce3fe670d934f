//! What a build writes, as pure functions: the domain XML from the
//! flavor and the image's `hw_*` properties, and the config drive's
//! `meta_data.json`.

use std::path::Path;

use serde_json::{json, Value};

/// Everything the domain XML is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainSpec {
    /// libvirt domain type: `kvm` or `qemu` (TCG).
    pub virt_type: String,
    /// Domain name (`instance-{uuid}`).
    pub name: String,
    /// The instance uuid (the domain's uuid).
    pub uuid: String,
    /// vCPUs (the flavor's).
    pub vcpus: i64,
    /// Memory in MiB (the flavor's).
    pub memory_mb: i64,
    /// `hw_machine_type` (default `pc`).
    pub machine: String,
    /// `hw_disk_bus` (default `virtio`).
    pub disk_bus: String,
    /// `hw_cdrom_bus` (default `ide` on `pc`, else `scsi`).
    pub cdrom_bus: String,
    /// The root disk (qcow2 overlay): the first disk, booted from.
    pub disk: String,
    /// More qcow2 disks after it, in order (the flavor's ephemeral and
    /// swap disks; a rescued guest's own root disk).
    pub extra_disks: Vec<String>,
    /// The config drive (ISO 9660).
    pub config_drive: String,
    /// The serial console's log file.
    pub console_log: String,
    /// Kernel and ramdisk of an AMI-style image, and the kernel command
    /// line.
    pub kernel: Option<(String, Option<String>, String)>,
    /// One NIC per MAC address (user-mode networking: the guest's own
    /// NAT to the outside, with QEMU's DHCP; no network service behind).
    pub nics: Vec<String>,
    /// The NICs' model (`hw_vif_model`, default `virtio`).
    pub vif_model: String,
    /// `hw_firmware_type` is `uefi`: libvirt picks the UEFI firmware
    /// (OVMF, which the host must have).
    pub uefi: bool,
}

/// The NIC models `hw_vif_model` may name for QEMU (Nova's libvirt
/// driver's for x86).
pub const VIF_MODELS: &[&str] = &["virtio", "e1000", "e1000e", "ne2k_pci", "pcnet", "rtl8139"];

/// The NIC model for an image's properties; Nova's `UnsupportedHardware`
/// text for one QEMU cannot give.
pub fn vif_model(properties: &Value, virt_type: &str) -> Result<String, String> {
    let model = properties.get("hw_vif_model").and_then(Value::as_str).filter(|v| !v.is_empty()).unwrap_or("virtio");
    if VIF_MODELS.contains(&model) {
        Ok(model.to_owned())
    } else {
        Err(format!("Requested hardware '{model}' is not supported by the '{virt_type}' virt driver"))
    }
}

/// The MAC address of a guest's `index`th NIC: Nova's (Neutron's)
/// `fa:16:3e` prefix and three bytes of the instance uuid and the index,
/// the same on every host the guest moves to.
pub fn mac_address(instance: &str, index: usize) -> String {
    let hash = instance
        .bytes()
        .chain(index.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let b = hash.to_be_bytes();
    format!("fa:16:3e:{:02x}:{:02x}:{:02x}", b[5], b[6], b[7])
}

impl DomainSpec {
    /// The buses for `properties` (an image's), with Nova's names and
    /// defaults the project's guest kernel can see (it has no AHCI: no
    /// SATA by default).
    pub fn buses(properties: &Value) -> (String, String, String) {
        let prop = |k: &str| properties.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
        let machine = prop("hw_machine_type").unwrap_or("pc").to_owned();
        let disk_bus = prop("hw_disk_bus").unwrap_or("virtio").to_owned();
        let default_cdrom = if machine == "pc" || machine.starts_with("pc-i440fx") { "ide" } else { "scsi" };
        let cdrom_bus = prop("hw_cdrom_bus").unwrap_or(default_cdrom).to_owned();
        (machine, disk_bus, cdrom_bus)
    }

    /// The domain XML.
    pub fn xml(&self) -> String {
        let os = match &self.kernel {
            Some((kernel, initrd, cmdline)) => {
                let initrd = initrd.as_ref().map(|i| format!("\n    <initrd>{}</initrd>", esc(i))).unwrap_or_default();
                format!("    <kernel>{}</kernel>{initrd}\n    <cmdline>{}</cmdline>\n", esc(kernel), esc(cmdline))
            }
            None => "    <boot dev='hd'/>\n".to_owned(),
        };
        let nics: String = self
            .nics
            .iter()
            .map(|mac| {
                format!(
                    "    <interface type='user'>\n      <mac address='{}'/>\n      <model type='{}'/>\n    </interface>\n",
                    esc(mac),
                    esc(&self.vif_model)
                )
            })
            .collect();
        let firmware = if self.uefi { " firmware='efi'" } else { "" };
        let disks = u8::try_from(1 + self.extra_disks.len()).unwrap_or(u8::MAX);
        let disk_dev = dev_name(&self.disk_bus, 0);
        let cdrom_dev = dev_name(&self.cdrom_bus, if self.cdrom_bus == self.disk_bus { disks } else { 0 });
        let cdrom_dev = if self.cdrom_bus == "ide" && self.disk_bus != "ide" { "hdc".to_owned() } else { cdrom_dev };
        let scsi = if self.disk_bus == "scsi" || self.cdrom_bus == "scsi" {
            "    <controller type='scsi' index='0' model='virtio-scsi'/>\n"
        } else {
            ""
        };
        let extra: String = self
            .extra_disks
            .iter()
            .enumerate()
            .map(|(i, path)| {
                let dev = dev_name(&self.disk_bus, u8::try_from(i + 1).unwrap_or(u8::MAX));
                format!(
                    "    <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2'/>\n      \
                     <source file='{}'/>\n      <target dev='{dev}' bus='{}'/>\n    </disk>\n",
                    esc(path),
                    esc(&self.disk_bus)
                )
            })
            .collect();
        format!(
            "<domain type='{vt}'>
  <name>{name}</name>
  <uuid>{uuid}</uuid>
  <memory unit='MiB'>{mem}</memory>
  <vcpu>{vcpus}</vcpu>
  <sysinfo type='smbios'>
    <system>
      <entry name='manufacturer'>OpenStack Foundation</entry>
      <entry name='product'>OpenStack Nova</entry>
      <entry name='serial'>{uuid}</entry>
      <entry name='uuid'>{uuid}</entry>
    </system>
  </sysinfo>
  <os{firmware}>
    <type arch='x86_64' machine='{machine}'>hvm</type>
{os}    <smbios mode='sysinfo'/>
  </os>
  <features><acpi/><apic/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
{scsi}    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='{disk}'/>
      <target dev='{disk_dev}' bus='{disk_bus}'/>
    </disk>
{extra}    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='{cd}'/>
      <target dev='{cdrom_dev}' bus='{cdrom_bus}'/>
      <readonly/>
    </disk>
{nics}    <serial type='pty'>
      <log file='{log}' append='on'/>
      <target port='0'/>
    </serial>
    <console type='pty'>
      <target type='serial' port='0'/>
    </console>
    <memballoon model='virtio'/>
  </devices>
</domain>
",
            vt = esc(&self.virt_type),
            name = esc(&self.name),
            uuid = esc(&self.uuid),
            mem = self.memory_mb,
            vcpus = self.vcpus,
            machine = esc(&self.machine),
            disk = esc(&self.disk),
            disk_bus = esc(&self.disk_bus),
            cd = esc(&self.config_drive),
            cdrom_bus = esc(&self.cdrom_bus),
            log = esc(&self.console_log),
        )
    }
}

/// The `index`th device name on `bus` (`vda`, `hdc`, `sdb`).
fn dev_name(bus: &str, index: u8) -> String {
    let prefix = match bus {
        "virtio" => "vd",
        "ide" => "hd",
        _ => "sd",
    };
    format!("{prefix}{}", (b'a' + index) as char)
}

/// XML text and attribute escaping.
pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('\'', "&apos;").replace('"', "&quot;")
}

/// The config drive's `openstack/latest/meta_data.json` for `server`
/// (the compute API's view of it) and the key pair's public key.
pub fn meta_data(server: &Value, key_data: Option<&str>) -> Value {
    let name = server["name"].as_str().unwrap_or("");
    let hostname = server["OS-EXT-SRV-ATTR:hostname"].as_str().filter(|h| !h.is_empty()).unwrap_or(name);
    let mut meta = json!({
        "uuid": server["id"],
        "name": name,
        "hostname": hostname,
        "launch_index": server["OS-EXT-SRV-ATTR:launch_index"].as_i64().unwrap_or(0),
        "availability_zone": server["OS-EXT-AZ:availability_zone"],
        "project_id": server["tenant_id"],
        "meta": server.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "devices": [],
    });
    if let Some(key) = key_data {
        let key_name = server["key_name"].as_str().unwrap_or("key");
        meta["public_keys"] = json!({ key_name: key });
        meta["keys"] = json!([{"name": key_name, "type": "ssh", "data": key}]);
    }
    meta
}

/// Decode standard base64 (user data), ignoring whitespace; `None` when
/// it is not base64.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// `path` as text for the XML (lossy on non-UTF-8 paths).
pub fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(machine: &str, disk: &str, cdrom: &str) -> DomainSpec {
        DomainSpec {
            virt_type: "qemu".into(),
            name: "instance-u".into(),
            uuid: "u".into(),
            vcpus: 2,
            memory_mb: 256,
            machine: machine.into(),
            disk_bus: disk.into(),
            cdrom_bus: cdrom.into(),
            disk: "/i/u/disk".into(),
            extra_disks: Vec::new(),
            config_drive: "/i/u/disk.config".into(),
            console_log: "/i/u/console.log".into(),
            kernel: Some(("/i/_base/k".into(), Some("/i/_base/r".into()), "root=/dev/vda console=ttyS0".into())),
            nics: Vec::new(),
            vif_model: "virtio".into(),
            uefi: false,
        }
    }

    #[test]
    fn nics_take_the_images_model_and_stable_macs_and_uefi_its_firmware() {
        assert_eq!(vif_model(&json!({}), "qemu"), Ok("virtio".to_owned()));
        assert_eq!(vif_model(&json!({"hw_vif_model": "e1000"}), "qemu"), Ok("e1000".to_owned()));
        assert_eq!(
            vif_model(&json!({"hw_vif_model": "vmxnet9"}), "kvm"),
            Err("Requested hardware 'vmxnet9' is not supported by the 'kvm' virt driver".to_owned())
        );
        let id = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
        let (first, second) = (mac_address(id, 0), mac_address(id, 1));
        assert!(first.starts_with("fa:16:3e:") && first.len() == 17, "{first}");
        assert_ne!(first, second);
        assert_eq!(first, mac_address(id, 0), "the same on every host");
        let mut with = spec("pc", "virtio", "ide");
        assert!(!with.xml().contains("<interface"), "no NIC without a network");
        with.nics = vec![first.clone(), second.clone()];
        with.vif_model = "e1000".into();
        with.uefi = true;
        let xml = with.xml();
        assert_eq!(xml.matches("<interface type='user'>").count(), 2, "{xml}");
        assert!(xml.contains(&format!("<mac address='{first}'/>")) && xml.contains("<model type='e1000'/>"), "{xml}");
        assert!(xml.contains("<os firmware='efi'>"), "{xml}");
    }

    #[test]
    fn buses_default_to_what_the_guest_kernel_sees_and_honour_the_image() {
        let none = json!({});
        assert_eq!(DomainSpec::buses(&none), ("pc".into(), "virtio".into(), "ide".into()));
        let q35 = json!({"hw_machine_type": "q35"});
        assert_eq!(DomainSpec::buses(&q35), ("q35".into(), "virtio".into(), "scsi".into()));
        let chosen = json!({"hw_machine_type": "q35", "hw_disk_bus": "scsi", "hw_cdrom_bus": "sata"});
        assert_eq!(DomainSpec::buses(&chosen), ("q35".into(), "scsi".into(), "sata".into()));
    }

    #[test]
    fn the_domain_xml_carries_the_flavor_the_buses_and_the_kernel() {
        let xml = spec("pc", "virtio", "ide").xml();
        assert!(xml.contains("<memory unit='MiB'>256</memory>") && xml.contains("<vcpu>2</vcpu>"), "{xml}");
        assert!(xml.contains("machine='pc'") && xml.contains("<target dev='vda' bus='virtio'/>"), "{xml}");
        assert!(xml.contains("<target dev='hdc' bus='ide'/>") && xml.contains("<kernel>/i/_base/k</kernel>"), "{xml}");
        assert!(!xml.contains("virtio-scsi"), "{xml}");
        let xml = spec("q35", "scsi", "scsi").xml();
        assert!(xml.contains("<target dev='sda' bus='scsi'/>") && xml.contains("<target dev='sdb' bus='scsi'/>"));
        assert!(xml.contains("model='virtio-scsi'"), "{xml}");
        // Ephemeral and swap (or a rescued guest's own disk) after the
        // root disk, the config drive after them on a shared bus.
        let mut with_more = spec("q35", "virtio", "virtio");
        with_more.extra_disks = vec!["/i/u/disk.local".into(), "/i/u/disk.swap".into()];
        let xml = with_more.xml();
        let at = |text: &str| xml.find(text).unwrap_or_else(|| panic!("{text} not in {xml}"));
        assert!(at("<source file='/i/u/disk'/>") < at("<source file='/i/u/disk.local'/>"), "{xml}");
        assert!(at("<source file='/i/u/disk.local'/>") < at("<target dev='vdb' bus='virtio'/>"), "{xml}");
        assert!(at("<source file='/i/u/disk.swap'/>") < at("<target dev='vdc' bus='virtio'/>"), "{xml}");
        assert!(at("<source file='/i/u/disk.config'/>") < at("<target dev='vdd' bus='virtio'/>"), "{xml}");
        assert_eq!(esc("a'<&>\""), "a&apos;&lt;&amp;&gt;&quot;");
    }

    #[test]
    fn meta_data_and_user_data() {
        let server = json!({"id": "u1", "name": "vm 1", "OS-EXT-SRV-ATTR:hostname": "vm-1", "key_name": "k1",
                            "tenant_id": "p", "metadata": {"a": "b"}});
        let meta = meta_data(&server, Some("ssh-ed25519 AAAA x"));
        assert_eq!(meta["uuid"], "u1");
        assert_eq!(meta["hostname"], "vm-1");
        assert_eq!(meta["public_keys"]["k1"], "ssh-ed25519 AAAA x");
        assert!(meta_data(&server, None).get("public_keys").is_none());
        assert_eq!(base64_decode("aGVsbG8g\nd29ybGQ=").as_deref(), Some(&b"hello world"[..]));
        assert_eq!(base64_decode("not base64!"), None);
    }
}
