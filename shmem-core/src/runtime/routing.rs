//! Which engine serves which PE.

use super::*;

impl Runtime {
    /// Engine used for each PE, e.g. `"HCCS x4"`.
    pub fn route_summary(&self) -> String {
        let mut parts = Vec::new();
        for (i, t) in self.transports.iter().enumerate() {
            let n = self.routes.iter().filter(|&&r| r as usize == i).count();
            if n > 0 {
                parts.push(format!("{} x{n}", t.name()));
            }
        }
        parts.join(", ")
    }

    /// Name of the engine routing to `pe`.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] for a bad `pe`; [`Error::NotInitialized`] after finalize;
    /// [`Error::PeerExited`] once `pe` is known dead.
    pub fn engine_for(&self, pe: PeId) -> Result<&'static str> {
        self.check_pe(pe)?;
        Ok(self.transports[self.routes[pe] as usize].name())
    }

    /// Names of the engines in use (routes and bulk routes).
    pub fn engines(&self) -> Vec<&'static str> {
        self.transports.iter().map(|t| t.name()).collect()
    }
}
