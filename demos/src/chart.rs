//! The storm's latency chart (`storm --svg FILE`), drawn with plotters.

use crate::server::Mode;
use crate::storm::Run;

/// Writes an SVG chart of the latency curves (served and rejected together, by percentile)
/// of `runs`, each labelled with its mode, to `path`.
pub fn svg(
    path: &str,
    title: &str,
    runs: &[(Mode, &Run)],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    let curves: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|(mode, out)| {
            let mut all: Vec<f64> = out.served.iter().chain(&out.rejected).copied().collect();
            all.sort_by(f64::total_cmp);
            let n = all.len().max(1) as f64;
            let points = all
                .iter()
                .enumerate()
                .map(|(i, &ms)| ((i + 1) as f64 / n * 100.0, ms.max(0.01)))
                .collect();
            let label = format!(
                "{}: {} served, {} rejected, {} walks",
                mode.name(),
                out.served.len(),
                out.rejected.len(),
                out.walks
            );
            (label, points)
        })
        .collect();
    let top = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(1.0_f64, f64::max)
        * 1.5;

    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..100.0, (0.01..top).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile of responses (served and rejected)")
        .y_desc("latency, ms (log)")
        .draw()?;
    let colors = [RED, BLUE, GREEN, MAGENTA];
    for ((label, points), color) in curves.into_iter().zip(colors) {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
