//! Reading configuration-file text without a file: the parser the
//! configuration loader uses, as one entry point that the fuzz targets and
//! property tests drive with arbitrary input.
//!
//! [`Config::from_toml_str`] applies the text over the defaults exactly as
//! [`Config::load`] applies a file (unknown keys refused, every value
//! checked, then [`Config::validate`]), without reading the environment. It
//! never panics, whatever the text.

use std::path::Path;

use super::{Config, LoadError};

/// The name refusals give the text, where a file's path would be.
const TEXT_ORIGIN: &str = "<configuration text>";

impl Config {
    /// The defaults with the TOML `text` applied over them, then validated;
    /// refusals name `<configuration text>` where a file's path would be. The
    /// environment is not read.
    ///
    /// ```
    /// use leasehold::config::Config;
    ///
    /// let config = Config::from_toml_str("[lease]\ntool_call = \"90s\"\n")?;
    /// assert_eq!(config.lease_tool_call.value.as_secs(), 90);
    /// let refused = Config::from_toml_str("[lease]\ntool_call = \"1000 days\"\n").unwrap_err();
    /// assert!(refused.to_string().contains("LEASEHOLD_LEASE_TOOL_CALL (lease.tool_call)"));
    /// # Ok::<(), leasehold::config::LoadError>(())
    /// ```
    pub fn from_toml_str(text: &str) -> Result<Self, LoadError> {
        let mut config = Self::default();
        config.apply_toml(text, Path::new(TEXT_ORIGIN))?;
        config.validate()?;
        Ok(config)
    }
}
