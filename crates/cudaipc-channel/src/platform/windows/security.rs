// Users and access rights on Windows: the SIDs of this process's user and
// primary group, the owner of a handle, and security descriptors written in
// SDDL (the unix mode of a channel's files expressed with SIDs).

use std::io;
use std::os::windows::io::AsRawHandle;
use std::sync::OnceLock;

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, LocalFree};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, GetSecurityInfo,
    SDDL_REVISION_1, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    GROUP_SECURITY_INFORMATION, GetTokenInformation, OWNER_SECURITY_INFORMATION,
    PSECURITY_DESCRIPTOR, PSID, SECURITY_ATTRIBUTES, TOKEN_PRIMARY_GROUP, TOKEN_QUERY, TOKEN_USER,
    TokenPrimaryGroup, TokenUser,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

use super::wide;

/// The text form of a SID (`S-1-5-21-...`).
fn sid_string(sid: PSID) -> io::Result<String> {
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: `sid` points to a valid SID; on success `text` is a
    // NUL-terminated string that LocalFree releases.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `text` is NUL-terminated (see above); read up to the NUL.
    let len = (0..).take_while(|&i| unsafe { *text.add(i) } != 0).count();
    // SAFETY: `len` u16s at `text` were just read.
    let string = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, len) });
    // SAFETY: allocated by ConvertSidToStringSidW with LocalAlloc.
    unsafe { LocalFree(text.cast()) };
    Ok(string)
}

/// A SID of this process's token: its user or its primary group.
fn token_sid(user: bool) -> io::Result<String> {
    // SAFETY: the current-process pseudo handle needs no closing.
    token_sid_of(unsafe { GetCurrentProcess() }, user)
}

/// The user and primary group SIDs of the process behind `process` (a
/// handle with query rights): who is at the other end of a pipe.
pub fn process_sids(process: HANDLE) -> io::Result<(String, String)> {
    Ok((token_sid_of(process, true)?, token_sid_of(process, false)?))
}

/// A SID of `process`'s token: its user or its primary group.
fn token_sid_of(process: HANDLE, user: bool) -> io::Result<String> {
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: a process handle with query rights and an out pointer.
    if unsafe { OpenProcessToken(process, TOKEN_QUERY, &mut token) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let class = if user { TokenUser } else { TokenPrimaryGroup };
    // Aligned for TOKEN_USER / TOKEN_PRIMARY_GROUP, large enough for any SID.
    let mut buffer = [0u64; 64];
    let mut needed = 0u32;
    // SAFETY: a valid token handle and a buffer of the size given.
    let ok = unsafe {
        GetTokenInformation(
            token,
            class,
            buffer.as_mut_ptr().cast(),
            std::mem::size_of_val(&buffer) as u32,
            &mut needed,
        )
    };
    let error = io::Error::last_os_error();
    // SAFETY: the token handle opened above.
    unsafe { CloseHandle(token) };
    if ok == 0 {
        return Err(error);
    }
    let sid = if user {
        // SAFETY: GetTokenInformation filled a TOKEN_USER at the start.
        unsafe { (*(buffer.as_ptr() as *const TOKEN_USER)).User.Sid }
    } else {
        // SAFETY: GetTokenInformation filled a TOKEN_PRIMARY_GROUP at the start.
        unsafe { (*(buffer.as_ptr() as *const TOKEN_PRIMARY_GROUP)).PrimaryGroup }
    };
    sid_string(sid)
}

/// This process's user, as a SID string.
pub fn user_sid() -> &'static str {
    static SID: OnceLock<String> = OnceLock::new();
    // "S-1-0-0" (nobody) if the token cannot be read: nothing then matches.
    SID.get_or_init(|| token_sid(true).unwrap_or_else(|_| "S-1-0-0".into()))
}

/// This process's primary group, as a SID string (the `group` bits of a
/// channel's permissions).
pub fn group_sid() -> &'static str {
    static SID: OnceLock<String> = OnceLock::new();
    SID.get_or_init(|| token_sid(false).unwrap_or_else(|_| user_sid().to_owned()))
}

/// The 32-bit id the channel compares and reports for a SID (FNV-1a of its
/// text): Windows has no uids, and the channel's records hold 32 bits.
pub fn uid_of_sid(sid: &str) -> u32 {
    sid.bytes().fold(0x811c_9dc5u32, |hash, byte| {
        (hash ^ byte as u32).wrapping_mul(0x0100_0193)
    })
}

/// The owner and group of an open file, as SID strings (the handle needs
/// READ_CONTROL, which read access includes). A file without a group
/// reports its owner as group.
pub fn owner_and_group_sids(file: &impl AsRawHandle) -> io::Result<(String, String)> {
    let mut owner: PSID = std::ptr::null_mut();
    let mut group: PSID = std::ptr::null_mut();
    let mut descriptor: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: a valid file handle; `owner` and `group` point into
    // `descriptor`, which LocalFree releases after the SIDs were read.
    let rc = unsafe {
        GetSecurityInfo(
            file.as_raw_handle(),
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION | GROUP_SECURITY_INFORMATION,
            &mut owner,
            &mut group,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut descriptor,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc as i32));
    }
    let sids = if owner.is_null() {
        Err(io::Error::other("the file has no owner"))
    } else {
        sid_string(owner).and_then(|owner| {
            let group = if group.is_null() {
                owner.clone()
            } else {
                sid_string(group)?
            };
            Ok((owner, group))
        })
    };
    // SAFETY: allocated by GetSecurityInfo with LocalAlloc.
    unsafe { LocalFree(descriptor) };
    sids
}

/// The SDDL of a channel file created with unix `mode`: owned by this user,
/// a protected DACL (nothing inherited from the folder) that gives the user
/// full access and the primary group and all authenticated users ("other")
/// read and write as the mode's bits say. 0600 is owner-only.
pub fn file_sddl(mode: u32) -> String {
    let me = user_sid();
    let mut sddl = format!("O:{me}G:{}D:P(A;;FA;;;{me})", group_sid());
    let rights = |bits: u32| match (bits & 4 != 0, bits & 2 != 0) {
        (true, true) => Some("FRFW"),
        (true, false) => Some("FR"),
        (false, true) => Some("FW"),
        (false, false) => None,
    };
    if let Some(r) = rights(mode >> 3) {
        sddl.push_str(&format!("(A;;{r};;;{})", group_sid()));
    }
    if let Some(r) = rights(mode) {
        sddl.push_str(&format!("(A;;{r};;;AU)"));
    }
    sddl
}

/// Only this user may open (and duplicate) the object (exported CUDA
/// memory handles, before they are duplicated into a consumer).
pub fn owner_only_descriptor() -> io::Result<SecurityDescriptor> {
    SecurityDescriptor::from_sddl(&format!("D:P(A;;GA;;;{})", user_sid()))
}

/// A self-relative security descriptor, freed on drop.
pub struct SecurityDescriptor(PSECURITY_DESCRIPTOR);

impl SecurityDescriptor {
    pub fn from_sddl(sddl: &str) -> io::Result<Self> {
        let text = wide(sddl);
        let mut descriptor: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: a NUL-terminated UTF-16 string and an out pointer; the
        // descriptor is LocalAlloc'ed and freed in Drop.
        let ok = unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                text.as_ptr(),
                SDDL_REVISION_1,
                &mut descriptor,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(descriptor))
    }

    /// The descriptor itself, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut std::ffi::c_void {
        self.0
    }

    /// Attributes for a Create* call, valid while `self` lives; not inherited.
    pub fn attributes(&self) -> SECURITY_ATTRIBUTES {
        SECURITY_ATTRIBUTES {
            nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
            lpSecurityDescriptor: self.0,
            bInheritHandle: 0,
        }
    }
}

// SAFETY: LocalAlloc'ed memory, read only after it was built, and freed
// once (Drop): usable from any thread.
unsafe impl Send for SecurityDescriptor {}

impl Drop for SecurityDescriptor {
    fn drop(&mut self) {
        // SAFETY: allocated by ConvertStringSecurityDescriptorToSecurityDescriptorW.
        unsafe { LocalFree(self.0) };
    }
}

/// The DACL of an open file in SDDL (tests: what a file really grants).
#[cfg(test)]
pub fn dacl_sddl(file: &impl AsRawHandle) -> io::Result<String> {
    use windows_sys::Win32::Security::Authorization::ConvertSecurityDescriptorToStringSecurityDescriptorW;
    use windows_sys::Win32::Security::DACL_SECURITY_INFORMATION;
    let mut descriptor: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: a valid file handle; `descriptor` is LocalAlloc'ed and freed below.
    let rc = unsafe {
        GetSecurityInfo(
            file.as_raw_handle(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut descriptor,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc as i32));
    }
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: a valid descriptor; on success `text` is LocalAlloc'ed.
    let ok = unsafe {
        ConvertSecurityDescriptorToStringSecurityDescriptorW(
            descriptor,
            SDDL_REVISION_1,
            DACL_SECURITY_INFORMATION,
            &mut text,
            std::ptr::null_mut(),
        )
    };
    let result = if ok == 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: NUL-terminated; read up to the NUL, then freed.
        let len = (0..).take_while(|&i| unsafe { *text.add(i) } != 0).count();
        // SAFETY: `len` u16s at `text` were just read.
        let string = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, len) });
        // SAFETY: allocated by the conversion with LocalAlloc.
        unsafe { LocalFree(text.cast()) };
        Ok(string)
    };
    // SAFETY: allocated by GetSecurityInfo with LocalAlloc.
    unsafe { LocalFree(descriptor) };
    result
}
