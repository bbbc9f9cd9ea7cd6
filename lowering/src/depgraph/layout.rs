//! A layered drawing of a DAG whose edges go from a lower index to a higher one (the
//! dependency graph's node ids are its execution order): each node on the layer of its
//! longest path from a source, and the nodes of each layer ordered by the barycentre of their
//! neighbours, a few sweeps down and up (Sugiyama's method without dummy nodes: an edge that
//! spans layers is drawn as a curve). Computed when the page is written, so a page needs no
//! layout engine when it is viewed.

/// Where each node is drawn: its layer (row) and its place in the layer (column).
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub layer: Vec<usize>,
    pub column: Vec<usize>,
    /// Layers, and the most nodes in one layer.
    pub layers: usize,
    pub width: usize,
}

/// Sweeps of the barycentre ordering (each one down, then up).
const SWEEPS: usize = 4;

/// The layout of `n` nodes with `edges` (`from < to`; an edge that does not is ignored).
pub fn layered(n: usize, edges: &[(usize, usize)]) -> Layout {
    let edges: Vec<(usize, usize)> = edges
        .iter()
        .copied()
        .filter(|&(a, b)| a < b && b < n)
        .collect();
    let mut preds = vec![Vec::new(); n];
    let mut succs = vec![Vec::new(); n];
    for &(a, b) in &edges {
        preds[b].push(a);
        succs[a].push(b);
    }
    // Longest path from a source: the ids are a topological order.
    let mut layer = vec![0usize; n];
    for v in 0..n {
        layer[v] = preds[v].iter().map(|&u| layer[u] + 1).max().unwrap_or(0);
    }
    let layers = layer.iter().max().map_or(0, |l| l + 1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for v in 0..n {
        rows[layer[v]].push(v);
    }
    let mut column = vec![0usize; n];
    let place = |rows: &[Vec<usize>], column: &mut [usize]| {
        for row in rows {
            for (i, &v) in row.iter().enumerate() {
                column[v] = i;
            }
        }
    };
    place(&rows, &mut column);
    for _ in 0..SWEEPS {
        for down in [true, false] {
            let order: Vec<usize> = match down {
                true => (1..layers).collect(),
                false => (0..layers.saturating_sub(1)).rev().collect(),
            };
            for l in order {
                let side = if down { &preds } else { &succs };
                let mut keyed: Vec<(f64, usize)> = rows[l]
                    .iter()
                    .map(|&v| {
                        let ns = &side[v];
                        let key = match ns.len() {
                            0 => column[v] as f64,
                            k => ns.iter().map(|&u| column[u] as f64).sum::<f64>() / k as f64,
                        };
                        (key, v)
                    })
                    .collect();
                // Stable: ties keep execution order.
                keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                rows[l] = keyed.into_iter().map(|(_, v)| v).collect();
                for (i, &v) in rows[l].iter().enumerate() {
                    column[v] = i;
                }
            }
        }
    }
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    Layout {
        layer,
        column,
        layers,
        width,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A diamond 0 -> {1, 2} -> 3 and a tail 3 -> 4: layers by hand 0, 1, 1, 2, 3.
    #[test]
    fn longest_path_layers() {
        let l = layered(5, &[(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)]);
        assert_eq!(l.layer, vec![0, 1, 1, 2, 3]);
        assert_eq!((l.layers, l.width), (4, 2));
        // A long edge does not pull its target up: 0 -> 4 leaves 4 on layer 3.
        let l = layered(5, &[(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)]);
        assert_eq!(l.layer[4], 4);
    }

    /// Two chains 0 -> 2 and 1 -> 3, crossed in id order on the second layer when 3's
    /// producer is left of 2's: the barycentre puts each under its producer.
    #[test]
    fn barycentre_uncrosses() {
        // 0 -> 3, 1 -> 2: by id, layer 1 is [2, 3], which crosses; ordered: [3, 2].
        let l = layered(4, &[(0, 3), (1, 2)]);
        assert_eq!((l.column[0], l.column[1]), (0, 1));
        assert_eq!((l.column[3], l.column[2]), (0, 1));
    }

    #[test]
    fn bad_edges_are_ignored() {
        let l = layered(2, &[(1, 0), (0, 7)]);
        assert_eq!(l.layer, vec![0, 0]);
    }
}
