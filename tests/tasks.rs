//! Statistics of the §10 task generators: the copy rules always hold, bigram
//! frequencies converge to P, every copy-paste on-query has its source.

use rand::SeedableRng;
use rand::rngs::StdRng;
use sinklab::tasks::{BOS, BigramCopy, CopyPaste, SourceFamily};

#[test]
fn bigram_copy_trigger_rule_always_holds() {
    let mut rng = StdRng::seed_from_u64(1);
    let task = BigramCopy::new(12, 3, 0.3, &mut rng).unwrap();
    let mut triggers_seen = 0;
    for bos in [true, false] {
        for _ in 0..300 {
            let s = task.sample(40, bos, &mut rng);
            assert_eq!(s.tokens.len(), 40);
            assert_eq!(s.queries(), 39);
            let first = usize::from(bos);
            if bos {
                assert_eq!(s.tokens[0], BOS);
            }
            assert!(
                !task.is_trigger(s.tokens[first]),
                "x_1 must not be a trigger"
            );
            assert!(s.tokens[first..].iter().all(|&t| (1..=12).contains(&t)));
            for q in 0..s.queries() {
                let trig = q > first && task.is_trigger(s.tokens[q]);
                assert_eq!(s.source[q].is_some(), trig, "on exactly after a trigger");
                if let Some(p) = s.source[q] {
                    triggers_seen += 1;
                    assert_eq!(p, q - 1);
                    assert_eq!(s.tokens[q + 1], s.tokens[q - 1], "copy rule");
                }
            }
        }
    }
    // With k = 3 of 12 tokens as triggers, on-queries are frequent: the rule was exercised.
    assert!(triggers_seen > 1000, "{triggers_seen}");
}

#[test]
#[allow(clippy::needless_range_loop)] // a, b index P and the count table alike
fn bigram_frequencies_converge_to_p() {
    let mut rng = StdRng::seed_from_u64(2);
    let n = 6;
    let task = BigramCopy::new(n, 1, 1.0, &mut rng).unwrap();
    let mut counts = vec![vec![0usize; n]; n];
    for _ in 0..4000 {
        let s = task.sample(64, true, &mut rng);
        for q in 1..s.queries() {
            if s.source[q].is_none() {
                let a = s.tokens[q] as usize - 1;
                let b = s.tokens[q + 1] as usize - 1;
                counts[a][b] += 1;
            }
        }
    }
    for a in 1..n {
        let tot: usize = counts[a].iter().sum();
        assert!(tot > 5000, "row {a} has only {tot} transitions");
        for b in 0..n {
            let f = counts[a][b] as f64 / tot as f64;
            let p = task.p[a][b];
            // Binomial standard error; 5 s.e. plus a floor keeps the false-alarm rate negligible
            // over the 30 cells while still catching a wrong row (off by > ~0.02).
            let se = (p * (1.0 - p) / tot as f64).sqrt();
            assert!(
                (f - p).abs() < 5.0 * se + 1e-3,
                "P[{a}][{b}] = {p}, freq {f}, se {se}"
            );
        }
    }
}

#[test]
fn copy_paste_every_on_query_has_its_source() {
    let mut rng = StdRng::seed_from_u64(3);
    for family in [
        SourceFamily::PrevAfterTrigger,
        SourceFamily::PrevOccurrence,
        SourceFamily::RandomEarlier { p_on: 0.3 },
    ] {
        let task = CopyPaste::new(8, 2, family).unwrap();
        let mut on = 0;
        for _ in 0..200 {
            let s = task.sample(48, true, &mut rng);
            assert_eq!(s.tokens[0], BOS);
            for q in 0..s.queries() {
                if let Some(p) = s.source[q] {
                    on += 1;
                    assert!(
                        p >= 1 && p < q + 1,
                        "source {p} of query {q} must be an earlier real token"
                    );
                    assert!(p <= q);
                    assert_eq!(
                        s.tokens[q + 1],
                        s.tokens[p],
                        "on-query outputs the source value"
                    );
                    match family {
                        SourceFamily::PrevAfterTrigger => {
                            assert_eq!(p, q - 1);
                            assert!(s.tokens[q] <= 2);
                        }
                        SourceFamily::PrevOccurrence => {
                            let prev = p - 1;
                            assert_eq!(s.tokens[prev], s.tokens[q]);
                            assert!(p < q);
                            // Latest s with s + 1 < q: no occurrence strictly between s and q − 1.
                            assert!(
                                !s.tokens[p..q - 1].contains(&s.tokens[q]),
                                "last occurrence"
                            );
                        }
                        SourceFamily::RandomEarlier { .. } => assert!(p < q),
                    }
                } else if family == SourceFamily::PrevOccurrence {
                    // Off ⇒ no earlier occurrence s with s + 1 < q.
                    let tok = s.tokens[q];
                    if q >= 2 {
                        assert!(!s.tokens[1..q - 1].contains(&tok));
                    }
                }
            }
        }
        assert!(on > 100, "{family:?}: only {on} on-queries");
    }
}
