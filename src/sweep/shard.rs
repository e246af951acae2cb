//! Shards of a sweep: shard `i/N` (0-based `i < N`) takes the points with index ≡ i (mod N).

/// A shard `i/N` (0-based `i < N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Index.
    pub index: usize,
    /// Count.
    pub count: usize,
}

impl Shard {
    /// Whether the point with spec index `k` belongs to the shard.
    pub fn contains(&self, k: usize) -> bool {
        k % self.count == self.index
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once('/')
            .ok_or_else(|| format!("shard '{s}' is not i/N"))?;
        let index: usize = a
            .trim()
            .parse()
            .map_err(|_| format!("shard index '{a}' is not a number"))?;
        let count: usize = b
            .trim()
            .parse()
            .map_err(|_| format!("shard count '{b}' is not a number"))?;
        if count == 0 || index >= count {
            return Err(format!("shard {index}/{count}: need 0 <= i < N"));
        }
        Ok(Self { index, count })
    }
}
