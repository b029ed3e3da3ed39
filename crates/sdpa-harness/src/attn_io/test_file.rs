//! Test files for the readers' tests: a safetensors file under construction, entries by name.

use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// An entry: name, dtype, shape, bytes.
pub(super) type Entry = (String, Dtype, Vec<usize>, Vec<u8>);

/// Building a file entry by entry; the readers' test modules add their own valid file and
/// parse on top.
pub(super) trait Tensors: Sized {
    fn entries(&mut self) -> &mut Vec<Entry>;
    fn entries_ref(&self) -> &[Entry];

    /// Adds or replaces `name`, zero-filled.
    fn set(self, name: &str, dtype: Dtype, shape: &[usize]) -> Self {
        let n = shape.iter().product::<usize>() * dtype.bitsize() / 8;
        self.raw(name, dtype, shape, vec![0; n])
    }

    /// Adds or replaces the I32 tensor `name`.
    fn ints(self, name: &str, shape: &[usize], values: &[i32]) -> Self {
        let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.raw(name, Dtype::I32, shape, bytes)
    }

    fn raw(mut self, name: &str, dtype: Dtype, shape: &[usize], bytes: Vec<u8>) -> Self {
        let e = self.entries();
        e.retain(|(n, ..)| n != name);
        e.push((name.into(), dtype, shape.to_vec(), bytes));
        self
    }

    fn without(mut self, name: &str) -> Self {
        self.entries().retain(|(n, ..)| n != name);
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let views: Vec<(String, TensorView)> = self
            .entries_ref()
            .iter()
            .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize(views, None).unwrap()
    }
}
