//! A non-blocking NCCL communicator (feature `nccl`): every NCCL call returns at once, and the
//! host then waits for it with a bound, so a rank whose peer left gets an error instead of
//! blocking forever.
//!
//! A blocking communicator (cudarc's `Comm`) sets up its connections inside the first
//! collective and the first transfers, on the calling thread, and waits there for the peers
//! without a limit: a peer that exited before that point holds every other rank forever. Here
//! the communicator is created with `blocking = 0` (`ncclCommInitRankConfig`): init, each
//! collective and each group of transfers may return `ncclInProgress`, and the host polls
//! `ncclCommGetAsyncError` until the call is done, fails, or the bound passes; then the
//! communicator is aborted (`ncclCommAbort`, which never waits for peers).
//!
//! ```no_run
//! # fn main() -> fp8_sdpa::Result<()> {
//! use fp8_sdpa::cp::comm::Communicator;
//! use std::time::Duration;
//! let dev = fp8_sdpa::runtime::Device::open(0)?;
//! // Rank 0 makes the id and hands its bytes to the other ranks (a file, a socket...).
//! let id = cudarc::nccl::safe::Id::new().expect("NCCL id");
//! let comm = Communicator::init(dev.new_priority_stream()?, 0, 2, &id, Duration::from_secs(60))?;
//! # Ok(()) }
//! ```

use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nccl::safe::Id;
use cudarc::nccl::sys;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `NCCL_CONFIG_UNDEF_INT`: the field is left to NCCL.
const UNDEF: i32 = i32::MIN;

/// One rank's non-blocking communicator and the stream its work runs on. Dropping it aborts it.
pub struct Communicator {
    comm: sys::ncclComm_t,
    stream: Arc<CudaStream>,
    rank: usize,
    world_size: usize,
    timeout: Duration,
}

// SAFETY: an NCCL communicator may be used from any thread, one call at a time; `&mut self`
// or the owner's exclusive use orders the calls.
unsafe impl Send for Communicator {}

/// A failed NCCL call, with NCCL's own last message.
fn failed(comm: sys::ncclComm_t, what: &str, r: sys::ncclResult_t) -> Error {
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: p is non-null and one of the two strings below: NUL-terminated, kept
            // alive by NCCL (static, or the communicator's last-error buffer) while we copy it.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
    };
    // SAFETY: takes any result code and returns a static string.
    let name = text(unsafe { sys::ncclGetErrorString(r) });
    // SAFETY: `comm` is a communicator NCCL handed out or null, both of which it accepts.
    let last = text(unsafe { sys::ncclGetLastError(comm) });
    Error::Unsupported(format!(
        "NCCL {what}: {r:?} ({name}){}",
        if last.is_empty() {
            String::new()
        } else {
            format!(": {last}")
        }
    ))
}

/// Waits until `comm`'s last call is done: polls `ncclCommGetAsyncError` until it leaves
/// `ncclInProgress`, at most `timeout`.
fn settle(comm: sys::ncclComm_t, timeout: Duration, what: &str) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let mut state = sys::ncclResult_t::ncclInProgress;
        // SAFETY: `comm` is a communicator NCCL handed out (possibly still initializing,
        // which this call is made for) and not yet aborted; `state` is a valid out-pointer.
        let r = unsafe { sys::ncclCommGetAsyncError(comm, &mut state) };
        if r != sys::ncclResult_t::ncclSuccess {
            return Err(failed(comm, what, r));
        }
        match state {
            sys::ncclResult_t::ncclSuccess => return Ok(()),
            sys::ncclResult_t::ncclInProgress => {}
            e => return Err(failed(comm, what, e)),
        }
        let waited = t0.elapsed();
        if waited > timeout {
            return Err(Error::Unsupported(format!(
                "NCCL {what} did not finish within {} s: a peer rank failed, exited or has not \
                 joined (its own error says why)",
                timeout.as_secs_f64()
            )));
        }
        if waited < Duration::from_millis(20) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// A call's result: done, in progress (then waited for), or failed.
fn check(comm: sys::ncclComm_t, r: sys::ncclResult_t, timeout: Duration, what: &str) -> Result<()> {
    match r {
        sys::ncclResult_t::ncclSuccess => Ok(()),
        sys::ncclResult_t::ncclInProgress => settle(comm, timeout, what),
        e => Err(failed(comm, what, e)),
    }
}

impl Communicator {
    /// Joins rank `rank` of `world_size` to the communicator `id` names, its work on `stream`.
    /// Waits at most `timeout` for every rank to join; on error nothing is left behind.
    /// Give it a stream of [`Device::new_priority_stream`](crate::runtime::Device::new_priority_stream):
    /// on a normal stream, transfers that reach the GPU after a kernel filling every SM start
    /// only once its last blocks have started, which this communicator's do more often than a
    /// blocking one's (2 ranks, S 32k causal, a pass: 4.83 ms on a normal stream, 4.50-4.58 on
    /// a high-priority one, 4.43 with a blocking communicator; perf-notes, "A peer that
    /// left").
    pub fn init(
        stream: Arc<CudaStream>,
        rank: usize,
        world_size: usize,
        id: &Id,
        timeout: Duration,
    ) -> Result<Communicator> {
        let (rank_i, size_i) = super::nccl_rank(rank, world_size)?;
        crate::libs::ensure_nccl()?;
        let mut version = 0;
        // SAFETY: a valid out-pointer.
        let r = unsafe { sys::ncclGetVersion(&mut version) };
        if r != sys::ncclResult_t::ncclSuccess {
            return Err(failed(std::ptr::null_mut(), "version query", r));
        }
        // NCCL_CONFIG_INITIALIZER with `blocking = 0`: every field left to NCCL but that one.
        // NCCL reads `min(size, its own size)` bytes, so a library older or newer than these
        // bindings reads the fields it knows.
        let mut config = sys::ncclConfig_t {
            size: std::mem::size_of::<sys::ncclConfig_t>(),
            magic: 0xcafe_beef,
            version: version as u32,
            blocking: 0,
            cgaClusterSize: UNDEF,
            minCTAs: UNDEF,
            maxCTAs: UNDEF,
            netName: std::ptr::null(),
            splitShare: UNDEF,
            trafficClass: UNDEF,
            commName: std::ptr::null(),
            collnetEnable: UNDEF,
            CTAPolicy: UNDEF,
            shrinkShare: UNDEF,
            nvlsCTAs: UNDEF,
            nChannelsPerNetPeer: UNDEF,
            nvlinkCentricSched: UNDEF,
            graphUsageMode: UNDEF,
            numRmaCtx: UNDEF,
            maxP2pPeers: UNDEF,
        };
        stream
            .context()
            .bind_to_thread()
            .map_err(Error::driver("binding the rank's device"))?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        let raw_id = sys::ncclUniqueId {
            internal: *id.internal(),
        };
        // SAFETY: valid out-pointer and config; rank and size as NCCL takes them (nccl_rank).
        let r =
            unsafe { sys::ncclCommInitRankConfig(&mut comm, size_i, raw_id, rank_i, &mut config) };
        if comm.is_null() {
            return Err(failed(comm, "communicator init", r));
        }
        // From here on an error drops `out`, which aborts the half-made communicator.
        let out = Communicator {
            comm,
            stream,
            rank,
            world_size,
            timeout,
        };
        check(
            comm,
            r,
            timeout,
            "communicator init (waiting for every rank to join)",
        )?;
        Ok(out)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The stream the communicator's transfers run on.
    pub fn stream(&self) -> Arc<CudaStream> {
        self.stream.clone()
    }

    /// How long each call waits for its peers ([`Communicator::init`]'s bound unless set).
    pub fn set_timeout(&mut self, limit: Duration) {
        self.timeout = limit;
    }

    /// Whether NCCL has reported an error on this communicator (a peer's failure included).
    pub fn error(&self) -> Option<Error> {
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator and a valid out-pointer.
        let r = unsafe { sys::ncclCommGetAsyncError(self.comm, &mut state) };
        match (r, state) {
            (sys::ncclResult_t::ncclSuccess, sys::ncclResult_t::ncclSuccess)
            | (sys::ncclResult_t::ncclSuccess, sys::ncclResult_t::ncclInProgress) => None,
            (sys::ncclResult_t::ncclSuccess, e) | (e, _) => {
                Some(failed(self.comm, "communicator", e))
            }
        }
    }

    /// Every rank's `send` (`n` words each) into `recv` (`n x world_size`), in rank order, on
    /// the communicator's stream. Returns once NCCL has queued it (bounded wait).
    pub fn all_gather(&self, send: &CudaSlice<u64>, recv: &mut CudaSlice<u64>) -> Result<()> {
        let n = send.len();
        super::check_gather_room(n, self.world_size, recv.len())?;
        let (src, _read) = send.device_ptr(&self.stream);
        let (dst, _write) = recv.device_ptr_mut(&self.stream);
        // SAFETY: `src` holds `n` u64 and `dst` `n x world_size` (checked above), both live
        // until the guards record this stream's use of them (they drop after the call), so
        // later users of the buffers wait for the transfer.
        let r = unsafe {
            sys::ncclAllGather(
                src as *const _,
                dst as *mut _,
                n,
                sys::ncclDataType_t::ncclUint64,
                self.comm,
                self.stream.cu_stream() as _,
            )
        };
        check(self.comm, r, self.timeout, "all-gather")
    }

    /// Starts one ring step's transfers as one NCCL group: each of `send` to rank `to`, each
    /// of `recv` from rank `from`, byte for byte. The group may still be in NCCL's hands (a
    /// non-blocking communicator queues it on its own thread): the returned [`Pending`] holds
    /// the buffers' borrows until [`Pending::wait`] has seen it queued (bounded wait: the
    /// first transfers between two ranks set up their connection), so that their events
    /// follow the transfers. Work for other buffers can be queued in between. A sent buffer's
    /// read event becomes the transfer stream's (cudarc keeps one per buffer), so work on
    /// another stream that also read it is no longer tracked: before writing into such a
    /// buffer, order the writer after that stream explicitly (as `Ring` does each step).
    pub fn start_send_recv<'a>(
        &'a self,
        send: [&'a CudaSlice<u8>; 2],
        to: usize,
        recv: [&'a mut CudaSlice<u8>; 2],
        from: usize,
    ) -> Result<Pending<'a>> {
        let (to_i, _) = super::nccl_rank(to, self.world_size)?;
        let (from_i, _) = super::nccl_rank(from, self.world_size)?;
        let s = &self.stream;
        let sends: Vec<_> = send
            .into_iter()
            .map(|b| (b.device_ptr(s), b.len()))
            .collect();
        let recvs: Vec<_> = recv
            .into_iter()
            .map(|b| {
                let n = b.len();
                (b.device_ptr_mut(s), n)
            })
            .collect();
        // SAFETY: a group over this communicator only; every pointer is a live buffer of the
        // length passed (the guards in `sends`/`recvs` keep the borrows, and record the
        // stream's use when they drop: after `Pending::wait` has seen the group queued);
        // peers are ranks of this communicator (nccl_rank).
        let r = unsafe {
            let mut r = sys::ncclGroupStart();
            for ((ptr, _), n) in &sends {
                if r == sys::ncclResult_t::ncclSuccess {
                    r = sys::ncclSend(
                        *ptr as *const _,
                        *n,
                        sys::ncclDataType_t::ncclUint8,
                        to_i,
                        self.comm,
                        s.cu_stream() as _,
                    );
                }
            }
            for ((ptr, _), n) in &recvs {
                if r == sys::ncclResult_t::ncclSuccess {
                    r = sys::ncclRecv(
                        *ptr as *mut _,
                        *n,
                        sys::ncclDataType_t::ncclUint8,
                        from_i,
                        self.comm,
                        s.cu_stream() as _,
                    );
                }
            }
            // The group is closed whatever happened inside it.
            let end = sys::ncclGroupEnd();
            if r == sys::ncclResult_t::ncclSuccess {
                end
            } else {
                r
            }
        };
        Ok(Pending {
            comm: self,
            result: Some(r),
            _borrows: (sends, recvs),
        })
    }

    /// One ring step's transfers, waited for: [`Communicator::start_send_recv`] then
    /// [`Pending::wait`].
    pub fn send_recv(
        &self,
        send: [&CudaSlice<u8>; 2],
        to: usize,
        recv: [&mut CudaSlice<u8>; 2],
        from: usize,
    ) -> Result<()> {
        self.start_send_recv(send, to, recv, from)?.wait()
    }
}

/// A group of transfers NCCL may still be queueing, holding its buffers' borrows
/// ([`Communicator::start_send_recv`]).
pub struct Pending<'a> {
    comm: &'a Communicator,
    result: Option<sys::ncclResult_t>,
    _borrows: (Vec<Borrow<'a>>, Vec<Borrow<'a>>),
}

/// A buffer's device pointer and borrow guard, and its length in bytes.
type Borrow<'a> = (
    (
        cudarc::driver::sys::CUdeviceptr,
        cudarc::driver::SyncOnDrop<'a>,
    ),
    usize,
);

impl Pending<'_> {
    /// Waits (bounded by the communicator's timeout) until NCCL has queued the group, then
    /// releases the borrows: their events now follow the transfers.
    pub fn wait(mut self) -> Result<()> {
        let r = self.result.take().expect("waited once");
        check(self.comm.comm, r, self.comm.timeout, "send/recv")
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        // Not waited for (an error on the way): still let NCCL queue the group before the
        // borrows' events are recorded; its outcome is the caller's error path's to report.
        if let Some(r) = self.result.take() {
            let _ = check(self.comm.comm, r, self.comm.timeout, "send/recv");
        }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // SAFETY: the communicator is live and dropped once; ncclCommAbort ends its queued
        // work without waiting for peers. Its result is of no use here (nothing is left to
        // free either way).
        unsafe {
            sys::ncclCommAbort(self.comm);
        }
    }
}
