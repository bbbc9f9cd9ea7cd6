//! The heatmaps of a report page: a [`Grid`] drawn as an image (one pixel per cell, an 8-bit
//! BMP inlined as a `data:` URI, so the page size is bounded by the grid's, whatever the
//! batch), coloured by the ULP bucket of each cell's worst mismatch, with its axes, the native
//! tile boundaries and a legend.

use super::{Grid, MismatchMap, bucket_label};
use nnp_lowering::html::escape;
use std::fmt::Write as _;

/// Width of a plot in CSS pixels, and the most height.
const PLOT_W: usize = 640;
const PLOT_H: usize = 360;
/// Margins for the axes' labels.
const LEFT: usize = 64;
const BOTTOM: usize = 34;

/// The colour of a cell whose worst mismatch is in ULP bucket `bucket` (0: none): light grey,
/// then yellow (1 ULP) through orange and red to dark red (more than 2^15), and blue for a NaN
/// against a number, which is not a distance.
pub fn colour(bucket: u8, buckets: usize) -> [u8; 3] {
    const STOPS: [[f64; 3]; 4] = [
        [255.0, 224.0, 102.0],
        [253.0, 141.0, 60.0],
        [215.0, 25.0, 28.0],
        [103.0, 0.0, 31.0],
    ];
    let nan = buckets.saturating_sub(1);
    match usize::from(bucket) {
        0 => [240, 240, 240],
        b if b >= nan => [0, 114, 230],
        b => {
            let t = (b - 1) as f64 / (nan.saturating_sub(2).max(1)) as f64 * 3.0;
            let (i, f) = ((t.floor() as usize).min(2), t - t.floor().min(2.0));
            let mix = |k: usize| (STOPS[i][k] + (STOPS[i + 1][k] - STOPS[i][k]) * f).round() as u8;
            [mix(0), mix(1), mix(2)]
        }
    }
}

/// Standard base64 (RFC 4648, with padding).
pub fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * k)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An 8-bit palette BMP of `width` x `height` pixels, top row first (`pixels` row-major,
/// palette indices).
pub fn bmp(width: usize, height: usize, palette: &[[u8; 3]], pixels: &[u8]) -> Vec<u8> {
    let stride = width.div_ceil(4) * 4;
    let offset = 14 + 40 + 4 * palette.len();
    let size = offset + stride * height;
    let mut out = Vec::with_capacity(size);
    let u32le = |out: &mut Vec<u8>, v: usize| out.extend_from_slice(&(v as u32).to_le_bytes());
    out.extend_from_slice(b"BM");
    u32le(&mut out, size);
    u32le(&mut out, 0);
    u32le(&mut out, offset);
    u32le(&mut out, 40);
    u32le(&mut out, width);
    // A negative height: rows top-down.
    out.extend_from_slice(&(-(height as i32)).to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&8u16.to_le_bytes());
    for v in [0, stride * height, 2835, 2835, palette.len(), 0] {
        u32le(&mut out, v);
    }
    for [r, g, b] in palette {
        out.extend_from_slice(&[*b, *g, *r, 0]);
    }
    for row in pixels.chunks(width.max(1)).take(height) {
        out.extend_from_slice(row);
        out.resize(out.len() + stride - row.len(), 0);
    }
    out
}

/// What a grid's axes are called.
pub struct Axes<'a> {
    pub rows: &'a str,
    pub cols: &'a str,
}

/// The SVG of one grid of map `index` (`which`: `items` or `rows`), with vertical lines at
/// every `lines` columns (the native tiles, or an item's rows; 0: none).
pub fn grid_svg(
    grid: &Grid,
    index: usize,
    which: &str,
    axes: &Axes,
    lines: usize,
    buckets: usize,
) -> String {
    let palette: Vec<[u8; 3]> = (0..buckets).map(|b| colour(b as u8, buckets)).collect();
    let image = bmp(grid.bins[1], grid.bins[0], &palette, &grid.worst);
    let h = (grid.bins[0] * 8).clamp(48, PLOT_H);
    let (w, total_w, total_h) = (PLOT_W, LEFT + PLOT_W + 10, h + BOTTOM + 8);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heat\" data-map=\"{index}\" data-grid=\"{which}\" \
         width=\"{total_w}\" height=\"{total_h}\" viewBox=\"0 0 {total_w} {total_h}\">\
         <image x=\"{LEFT}\" y=\"4\" width=\"{w}\" height=\"{h}\" preserveAspectRatio=\"none\" \
         style=\"image-rendering:pixelated\" href=\"data:image/bmp;base64,{}\"/>",
        base64(&image)
    );
    let cols = grid.units[1];
    if lines > 0 && lines < cols && cols / lines <= 64 {
        for k in (lines..cols).step_by(lines) {
            let x = LEFT as f64 + w as f64 * k as f64 / cols as f64;
            let _ = write!(
                s,
                "<line class=\"tile\" x1=\"{x:.1}\" y1=\"4\" x2=\"{x:.1}\" y2=\"{}\"/>",
                4 + h
            );
        }
    }
    let _ = write!(
        s,
        "<rect class=\"area\" x=\"{LEFT}\" y=\"4\" width=\"{w}\" height=\"{h}\"/>\
         <text class=\"ax\" x=\"{}\" y=\"14\" text-anchor=\"end\">0</text>\
         <text class=\"ax\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
         <text class=\"ax\" x=\"{LEFT}\" y=\"{}\">0</text>\
         <text class=\"ax\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
         <text class=\"lab\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text class=\"lab\" transform=\"translate(12,{}) rotate(-90)\" text-anchor=\"middle\">{}</text></svg>",
        LEFT - 4,
        LEFT - 4,
        4 + h,
        grid.units[0] - 1,
        h + 18,
        LEFT + w,
        h + 18,
        cols - 1,
        LEFT + w / 2,
        h + 32,
        escape(axes.cols),
        4 + h / 2,
        escape(axes.rows),
    );
    s
}

/// Both heatmaps of a map, with their titles.
pub fn map_html(map: &MismatchMap, index: usize, shape: &[usize], buckets: usize) -> String {
    let row_len = map.rows.units[1];
    let rows = map.rows.units[0];
    let mut s = String::new();
    let _ = write!(
        s,
        "<h3>output <code>{}</code> {}</h3><p class=\"note\">Each cell: the worst mismatch of its \
         bin (items and elements binned to at most {} x {} cells); hover for its range and count.</p>",
        escape(&map.output),
        escape(&format!("{shape:?}")),
        super::MAP_BINS,
        super::MAP_BINS
    );
    s.push_str("<div class=\"maps\"><figure>");
    let item_lines = if rows > 1 { row_len } else { 0 };
    let axes = Axes {
        rows: "batch item",
        cols: "element of the item (row-major; lines: rows)",
    };
    s.push_str(&grid_svg(
        &map.items, index, "items", &axes, item_lines, buckets,
    ));
    s.push_str("<figcaption>items x elements</figcaption></figure>");
    if rows > 1 || row_len > map.native {
        let axes = Axes {
            rows: "row (step)",
            cols: &format!("column: tile x {} lanes (lines: tiles)", map.native),
        };
        s.push_str("<figure>");
        s.push_str(&grid_svg(
            &map.rows, index, "rows", &axes, map.native, buckets,
        ));
        s.push_str(
            "<figcaption>rows x lanes over every item, native tiles marked</figcaption></figure>",
        );
    }
    s.push_str("</div>");
    s
}

/// The legend: each bucket's colour and label, 0 (no mismatch) to a NaN against a number.
pub fn legend(buckets: usize) -> String {
    let mut s = String::from("<div class=\"legend\">");
    for b in 0..buckets {
        let [r, g, bl] = colour(b as u8, buckets);
        let label = match b {
            0 => "none".to_string(),
            b => bucket_label(b, buckets),
        };
        let _ = write!(
            s,
            "<span><i style=\"background:rgb({r},{g},{bl})\"></i>{}</span>",
            escape(&label)
        );
    }
    s.push_str(" ULP</div>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_by_hand() {
        // RFC 4648's test vectors.
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    /// A 3 x 2 BMP: 54 bytes of headers, 2 colours, rows of 3 padded to 4.
    #[test]
    fn bmp_layout_by_hand() {
        let b = bmp(3, 2, &[[0, 0, 0], [255, 0, 0]], &[0, 1, 0, 1, 1, 1]);
        assert_eq!(&b[..2], b"BM");
        assert_eq!(b.len(), 14 + 40 + 8 + 8);
        assert_eq!(u32::from_le_bytes([b[10], b[11], b[12], b[13]]), 62);
        assert_eq!(i32::from_le_bytes([b[22], b[23], b[24], b[25]]), -2);
        // Red is stored blue, green, red, 0.
        assert_eq!(&b[58..62], &[0, 0, 255, 0]);
        assert_eq!(&b[62..], &[0, 1, 0, 0, 1, 1, 1, 0]);
    }

    #[test]
    fn colours_end_points() {
        assert_eq!(colour(0, 19), [240, 240, 240]);
        assert_eq!(colour(1, 19), [255, 224, 102]);
        assert_eq!(colour(17, 19), [103, 0, 31]);
        assert_eq!(colour(18, 19), [0, 114, 230]);
    }
}
