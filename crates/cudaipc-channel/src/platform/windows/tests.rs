// Windows-only checks of the platform layer: the security descriptors that
// stand for unix modes.

use super::security::{self, file_sddl, user_sid};
use super::*;

#[test]
fn a_mode_becomes_access_for_the_user_group_and_others() {
    let me = user_sid();
    let owner_only = file_sddl(0o600);
    assert!(owner_only.starts_with(&format!("O:{me}")), "{owner_only}");
    assert!(
        owner_only.contains(&format!("(A;;FA;;;{me})")),
        "{owner_only}"
    );
    assert_eq!(owner_only.matches("(A;").count(), 1, "{owner_only}");
    assert!(owner_only.contains("D:P"), "protected: {owner_only}");
    let group = file_sddl(0o660);
    assert!(
        group.contains(&format!("(A;;FRFW;;;{})", security::group_sid())),
        "{group}"
    );
    assert!(!group.contains(";;;AU)"), "{group}");
    let everyone = file_sddl(0o644);
    assert!(everyone.contains("(A;;FR;;;AU)"), "{everyone}");
}

/// What was asked is what the file has: its owner is this user, and an
/// owner-only file grants nobody else anything.
#[test]
fn a_created_file_carries_its_descriptor() {
    let path = std::env::temp_dir().join(format!("cudaipc-sd-{:x}", random_u64()));
    let file = create_new_file(&path, 0o600).unwrap();
    assert_eq!(owner_uid(&file).unwrap(), effective_uid());
    let (owner, _) = security::owner_and_group_sids(&file).unwrap();
    assert_eq!(owner, user_sid());
    let dacl = security::dacl_sddl(&file).unwrap();
    assert!(dacl.contains(user_sid()), "{dacl}");
    assert!(
        !dacl.contains(";;;AU)") && !dacl.contains(";;;WD)"),
        "{dacl}"
    );
    drop(file);
    std::fs::remove_file(&path).unwrap();
}
