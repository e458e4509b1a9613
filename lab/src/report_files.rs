//! An experiment's report as the files of one folder: `report.json`,
//! `report.csv` and the two pictures, `tradeoff.svg` and `wasted.svg`.
//!
//! Apart from the report (`report.rs`) and its pictures (`plot.rs`), which
//! are drawn from it: neither needs to know what else is written beside it.

use std::path::Path;

use super::plot::{tradeoff_svg, wasted_svg};
use super::report::Report;

impl Report {
    /// Writes `report.json`, `report.csv` and the plots `tradeoff.svg` and
    /// `wasted.svg` into `dir`, creating it.
    pub fn write_to(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.json"), self.to_json())?;
        let csv = self.to_csv().map_err(std::io::Error::other)?;
        std::fs::write(dir.join("report.csv"), csv)?;
        let tradeoff = tradeoff_svg(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("tradeoff.svg"), tradeoff)?;
        let wasted = wasted_svg(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("wasted.svg"), wasted)
    }
}
