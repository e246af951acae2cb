//! # Diagonal = soft switch, and its representability (docs/theory.md §5, claims A4, A6; ours)
//!
//! Statement 1 (ε-diagonal bound). If $A_{ii} = 1-\varepsilon_i$ then
//! $o_i = W_{VO}x_i + r_i$ with $\|r_i\| \le 2\varepsilon_i\max_j\|v_j\|$
//! (since $r_i = \sum_{j\ne i}A_{ij}v_j - \varepsilon_i v_i$). Hence the block is
//! token-wise up to $O(\varepsilon)$: $y_i \approx N((I+W_{VO})x_i)$, an MLP
//! layer without hidden nonlinearity, and moving every other token moves $o_i$
//! by at most $2(\varepsilon_i+\varepsilon_i')\max\|v\|$ (a soft switch).
//!
//! Statement 2 (representability by $cI$). $W_{QK}=cI$ represents an
//! ε-diagonal for every ε (choosing $c = \Delta_\varepsilon/\min\text{gap}$) iff
//! $\|x_i\|^2 > x_i\cdot x_j$ for every visible pair $j\ne i$; if some visible
//! pair has $x_i\cdot x_j \ge \|x_i\|^2$ then $A_{ii}\le A_{ij}$, so $A_{ii}\le\frac12$
//! for every $c>0$.

use sinklab::switch::{Assumption, check_diagonal_bound, check_diagonal_representability};

#[test]
fn diagonal_bound_and_token_wise_view() {
    let o = check_diagonal_bound(300, 3, Assumption::Kept);
    assert!(o.ok(), "{o:?}");
}

#[test]
fn a_tighter_false_bound_is_rejected() {
    // ½ instead of 2: the check must be able to fail.
    let o = check_diagonal_bound(300, 3, Assumption::Dropped);
    assert!(o.failed > 0, "{o:?}");
}

#[test]
fn representability_of_the_diagonal_by_c_identity() {
    let o = check_diagonal_representability(300, 4);
    assert!(o.ok(), "{o:?}");
}
