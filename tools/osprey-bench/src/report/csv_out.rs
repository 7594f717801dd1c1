//! `results.csv`: one row per point, every field.

use std::path::Path;

use super::row::ResultRow;
use super::ReportError;

/// Writes the rows with a header.
pub fn write_csv(path: &Path, rows: &[ResultRow]) -> Result<(), ReportError> {
    let mut w = csv::Writer::from_path(path).map_err(|e| ReportError::Csv(path.into(), e))?;
    for r in rows {
        w.serialize(r)
            .map_err(|e| ReportError::Csv(path.into(), e))?;
    }
    w.flush().map_err(|e| ReportError::Io(path.into(), e))
}
