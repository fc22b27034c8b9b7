// Who may be at the other end of a channel: the own user, and the users
// and groups a producer or consumer names.

use crate::ChannelError;
use crate::shm;

/// The processes allowed on the other end: the own user always, and these
/// users and (primary) groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peers {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

impl Peers {
    pub fn allows(&self, uid: u32, gid: u32) -> bool {
        uid == shm::effective_uid() || self.uids.contains(&uid) || self.gids.contains(&gid)
    }

    /// `"1000,1001"` (empty: nobody beside the own user); on Windows SIDs
    /// (`S-1-5-21-...`) too.
    pub fn parse_ids(text: &str) -> Result<Vec<u32>, ChannelError> {
        text.split(',')
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .map(|id| {
                crate::platform::parse_user_id(id)
                    .ok_or_else(|| ChannelError::NotAnId(id.to_owned()))
            })
            .collect()
    }
}
