//! The word-embedding table of [`super::Bert`], read in place from the weights file.

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Result, Tensor};

/// The word-embedding table, read in place from the memory-mapped weights file: a lookup
/// copies only the rows of the tokens it is given. Copying the whole table (30,522 × 384
/// values, half the file) into a tensor at load took much of the model's load (README
/// "Performance"), for the few hundred rows a text uses.
pub(super) struct MappedEmbedding {
    file: MmapedSafetensors,
    /// The table's name in `file`.
    name: String,
    rows: usize,
    dims: usize,
}

impl MappedEmbedding {
    /// The table `name` of `file`, which must be f32 and `(rows, dims)`.
    pub(super) fn new(
        file: MmapedSafetensors,
        name: String,
        rows: usize,
        dims: usize,
    ) -> Result<Self> {
        let view = file.get(&name)?;
        if DType::try_from(view.dtype()).ok() != Some(DType::F32) || view.shape() != [rows, dims] {
            candle_core::bail!(
                "{name} is {:?} {:?}, expected F32 [{rows}, {dims}]",
                view.dtype(),
                view.shape()
            );
        }
        Ok(MappedEmbedding { file, name, rows, dims })
    }

    /// `ids`: (batch, seq) u32 → (batch, seq, dims): each id's row plus the row of
    /// `positions` (`(max positions, dims)`, row by row) for its place in the sequence.
    pub(super) fn forward(&self, ids: &Tensor, positions: &[f32]) -> Result<Tensor> {
        let (b, s) = ids.dims2()?;
        if positions.len() < s * self.dims {
            candle_core::bail!(
                "{s} tokens exceed the model's {} positions",
                positions.len() / self.dims
            );
        }
        let table = self.file.get(&self.name)?;
        let table = table.data();
        let row_bytes = self.dims * 4;
        let mut out = Vec::with_capacity(b * s * self.dims);
        for (i, id) in ids.flatten_all()?.to_vec1::<u32>()?.into_iter().enumerate() {
            let id = id as usize;
            if id >= self.rows {
                candle_core::bail!("token id {id} is outside the vocabulary of {}", self.rows);
            }
            let row = &table[id * row_bytes..(id + 1) * row_bytes];
            let position = &positions[(i % s) * self.dims..][..self.dims];
            // The file's bytes are little-endian f32 at any alignment: decoded value by value
            // (a plain copy on little-endian CPUs).
            out.extend(
                row.chunks_exact(4)
                    .zip(position)
                    .map(|(v, p)| f32::from_le_bytes([v[0], v[1], v[2], v[3]]) + p),
            );
        }
        Tensor::from_vec(out, (b, s, self.dims), ids.device())
    }
}
