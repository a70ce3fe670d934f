//! Host discovery as nova-compute does it: VCPU from the online CPUs,
//! MEMORY_MB from `/proc/meminfo`, DISK_GB from the instances path's
//! filesystem, and the traits the driver and the CPU offer (os-traits
//! names: `COMPUTE_*` capabilities, `HW_CPU_X86_*` from the CPU flags).

use std::path::Path;

use anyhow::Context;

/// What this machine offers its guests (before reserved amounts).
#[derive(Debug, Clone, PartialEq)]
pub struct HostResources {
    /// Online CPUs.
    pub vcpus: i64,
    /// `MemTotal` in MiB.
    pub memory_mb: i64,
    /// Size of the instances path's filesystem in GiB.
    pub disk_gb: i64,
    /// Capability and CPU traits.
    pub traits: Vec<String>,
}

/// Discover this machine's resources (the instances path must exist).
pub fn discover(instances_path: &Path) -> anyhow::Result<HostResources> {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").context("reading online CPUs")?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mut traits: Vec<String> = CAPABILITY_TRAITS.iter().map(|t| (*t).to_owned()).collect();
    traits.extend(cpu_traits(&cpuinfo));
    Ok(HostResources {
        vcpus: count_cpus(&online).context("parsing /sys/devices/system/cpu/online")?,
        memory_mb: mem_total_mb(&meminfo).context("no MemTotal in /proc/meminfo")?,
        disk_gb: filesystem_gb(instances_path)?,
        traits,
    })
}

/// What the driver supports, as Nova's libvirt driver reports it.
const CAPABILITY_TRAITS: &[&str] = &[
    "COMPUTE_NODE",
    "COMPUTE_IMAGE_TYPE_RAW",
    "COMPUTE_IMAGE_TYPE_QCOW2",
    "COMPUTE_IMAGE_TYPE_AKI",
    "COMPUTE_IMAGE_TYPE_ARI",
    "COMPUTE_IMAGE_TYPE_AMI",
    "COMPUTE_STORAGE_BUS_VIRTIO",
    "COMPUTE_STORAGE_BUS_IDE",
    "COMPUTE_STORAGE_BUS_SCSI",
    "COMPUTE_STORAGE_BUS_SATA",
    "COMPUTE_GRAPHICS_MODEL_NONE",
    "COMPUTE_ARCH_X86_64",
    "HW_ARCH_X86_64",
];

/// Linux CPU flags (`/proc/cpuinfo`) and the os-traits names Nova maps
/// them to.
const CPU_FLAG_TRAITS: &[(&str, &str)] = &[
    ("3dnow", "HW_CPU_X86_3DNOW"),
    ("abm", "HW_CPU_X86_ABM"),
    ("aes", "HW_CPU_X86_AESNI"),
    ("avx", "HW_CPU_X86_AVX"),
    ("avx2", "HW_CPU_X86_AVX2"),
    ("avx512bw", "HW_CPU_X86_AVX512BW"),
    ("avx512cd", "HW_CPU_X86_AVX512CD"),
    ("avx512dq", "HW_CPU_X86_AVX512DQ"),
    ("avx512er", "HW_CPU_X86_AVX512ER"),
    ("avx512f", "HW_CPU_X86_AVX512F"),
    ("avx512ifma", "HW_CPU_X86_AVX512IFMA"),
    ("avx512pf", "HW_CPU_X86_AVX512PF"),
    ("avx512vbmi", "HW_CPU_X86_AVX512VBMI"),
    ("avx512_vbmi2", "HW_CPU_X86_AVX512VBMI2"),
    ("avx512vl", "HW_CPU_X86_AVX512VL"),
    ("avx512_vnni", "HW_CPU_X86_AVX512VNNI"),
    ("avx512_bitalg", "HW_CPU_X86_AVX512BITALG"),
    ("avx512_vpopcntdq", "HW_CPU_X86_AVX512VPOPCNTDQ"),
    ("gfni", "HW_CPU_X86_AVX512GFNI"),
    ("vaes", "HW_CPU_X86_AVX512VAES"),
    ("vpclmulqdq", "HW_CPU_X86_AVX512VPCLMULQDQ"),
    ("bmi1", "HW_CPU_X86_BMI"),
    ("bmi2", "HW_CPU_X86_BMI2"),
    ("pclmulqdq", "HW_CPU_X86_CLMUL"),
    ("f16c", "HW_CPU_X86_F16C"),
    ("fma", "HW_CPU_X86_FMA3"),
    ("fma4", "HW_CPU_X86_FMA4"),
    ("mmx", "HW_CPU_X86_MMX"),
    ("mpx", "HW_CPU_X86_MPX"),
    ("pdpe1gb", "HW_CPU_X86_PDPE1GB"),
    ("sha_ni", "HW_CPU_X86_SHA"),
    ("sse", "HW_CPU_X86_SSE"),
    ("sse2", "HW_CPU_X86_SSE2"),
    ("pni", "HW_CPU_X86_SSE3"),
    ("sse4_1", "HW_CPU_X86_SSE41"),
    ("sse4_2", "HW_CPU_X86_SSE42"),
    ("sse4a", "HW_CPU_X86_SSE4A"),
    ("ssse3", "HW_CPU_X86_SSSE3"),
    ("svm", "HW_CPU_X86_SVM"),
    ("tbm", "HW_CPU_X86_TBM"),
    ("vmx", "HW_CPU_X86_VMX"),
    ("xop", "HW_CPU_X86_XOP"),
    ("rtm", "HW_CPU_X86_TSX"),
];

/// The `HW_CPU_X86_*` traits of the first CPU's flags, sorted.
pub fn cpu_traits(cpuinfo: &str) -> Vec<String> {
    let Some(flags) =
        cpuinfo.lines().find_map(|l| l.strip_prefix("flags").and_then(|r| r.split_once(':')).map(|(_, f)| f))
    else {
        return Vec::new();
    };
    let flags: std::collections::HashSet<&str> = flags.split_whitespace().collect();
    let mut traits: Vec<String> =
        CPU_FLAG_TRAITS.iter().filter(|(flag, _)| flags.contains(flag)).map(|(_, t)| (*t).to_owned()).collect();
    traits.sort();
    traits.dedup();
    traits
}

/// CPUs in a kernel CPU list (`0-3,6`).
pub fn count_cpus(list: &str) -> Option<i64> {
    let mut n = 0;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.trim().parse::<i64>().ok()? - a.trim().parse::<i64>().ok()? + 1,
            None => {
                part.trim().parse::<i64>().ok()?;
                1
            }
        };
    }
    Some(n)
}

/// `MemTotal` of `/proc/meminfo` in MiB.
pub fn mem_total_mb(meminfo: &str) -> Option<i64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// Size of the filesystem holding `path` in GiB (`df`, POSIX output).
fn filesystem_gb(path: &Path) -> anyhow::Result<i64> {
    let out = std::process::Command::new("df")
        .args(["-P", "-k"])
        .arg(path)
        .output()
        .with_context(|| format!("running df on {}", path.display()))?;
    anyhow::ensure!(out.status.success(), "df {}: {}", path.display(), String::from_utf8_lossy(&out.stderr).trim());
    let text = String::from_utf8_lossy(&out.stdout);
    let kb: i64 = text
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("unexpected df output {text:?}"))?;
    Ok(kb / (1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_memory_and_flags_parse() {
        assert_eq!(count_cpus("0-1\n"), Some(2));
        assert_eq!(count_cpus("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpus("x"), None);
        assert_eq!(mem_total_mb("MemTotal:       16384000 kB\nMemFree: 1 kB\n"), Some(16000));
        let traits = cpu_traits("processor : 0\nflags\t\t: fpu sse sse2 pni avx2 aes sha_ni bogus\n");
        assert_eq!(
            traits,
            [
                "HW_CPU_X86_AESNI",
                "HW_CPU_X86_AVX2",
                "HW_CPU_X86_SHA",
                "HW_CPU_X86_SSE",
                "HW_CPU_X86_SSE2",
                "HW_CPU_X86_SSE3"
            ]
        );
    }
}
