//! Typed handles: the one place where a program's object pointer becomes
//! the library's wrapper and back.
//!
//! Every object the library hands out is a field of a `Box`ed
//! `#[repr(C)]` wrapper (`objects`): the `ibv_pd` of a `PdObj`, the
//! `ibv_context` inside the `verbs_context` of a `ContextObj`. A
//! [`Handle<W>`] is the wrapper's address, typed; [`Handle::to_c`] gives
//! the pointer the program holds and [`Handle::from_c`] takes it back.
//!
//! # Safety argument
//!
//! * Provenance. [`Handle::new`] keeps the pointer `Box::into_raw`
//!   returns, which may reach the whole wrapper; [`Handle::to_c`] offsets
//!   that pointer (never a reference to the field), so the program's
//!   pointer keeps the whole wrapper's provenance and [`Handle::from_c`]'s
//!   step back to the wrapper's start stays inside it. (A pointer made
//!   from a reference to the C field may reach that field only: reading
//!   the wrapper through it is undefined behaviour under Stacked Borrows,
//!   which the Miri tests below check.)
//! * Liveness. A wrapper is freed only by [`Handle::free`], which the
//!   destroy verb calls once; a handle is dereferenced ([`Handle::get`])
//!   only while the verbs contract keeps the object alive (the program
//!   passes only objects it has not destroyed; objects in use by others
//!   refuse destruction; the library's own records drop a handle before
//!   freeing its object).
//! * Aliasing. The C structure is written by the program (and by the
//!   library, e.g. `ibv_qp.state`) while the library holds `&W`, so it
//!   lives in a [`CPart`], an `UnsafeCell`: `&W` asserts nothing about
//!   those bytes, and they are read and written only through raw pointers
//!   ([`CPart::get`]).

use std::cell::UnsafeCell;
use std::ptr::NonNull;

/// The structure a C program sees, inside its wrapper. Same layout as `T`
/// (`UnsafeCell` is `repr(transparent)` in effect: "the same in-memory
/// representation as its inner type").
#[repr(transparent)]
pub struct CPart<T>(UnsafeCell<T>);

impl<T> CPart<T> {
    pub fn new(t: T) -> CPart<T> {
        CPart(UnsafeCell::new(t))
    }

    /// The structure, for reads and writes of its fields through the raw
    /// pointer (no reference to it is made while the program holds it).
    pub fn get(&self) -> *mut T {
        self.0.get()
    }
}

/// A wrapper the program reaches through a pointer to its C part.
///
/// # Safety
/// `OFFSET` is the byte offset, inside `Self`, of a `Self::C` that lies in
/// one of `Self`'s [`CPart`] fields (see [`c_object!`]).
pub unsafe trait CObject: Sized {
    /// What the program's pointer points to.
    type C;
    const OFFSET: usize;
}

/// Declares `$w` a [`CObject`] whose C part is its `CPart<$part>` field
/// `$field`, the program's pointer pointing `$inner` bytes into it.
macro_rules! c_object {
    ($w:ty, $field:ident: $part:ty, $c:ty, $inner:expr) => {
        // SAFETY: the offset is computed from the declaration, and the
        // function below proves `$field` is a `CPart<$part>`.
        unsafe impl $crate::handle::CObject for $w {
            type C = $c;
            const OFFSET: usize = ::std::mem::offset_of!($w, $field) + $inner;
        }
        const _: fn(&$w) -> &$crate::handle::CPart<$part> = |w| &w.$field;
        const _: () = assert!(
            $inner + ::std::mem::size_of::<$c>() <= ::std::mem::size_of::<$part>(),
            "the program's structure lies inside the C part"
        );
    };
    ($w:ty, $field:ident: $c:ty) => {
        $crate::handle::c_object!($w, $field: $c, $c, 0);
    };
}
pub(crate) use c_object;

/// A wrapper's address, typed. Copying it copies the address only; using
/// it is `unsafe` (module docs).
pub struct Handle<W>(NonNull<W>);

impl<W> Clone for Handle<W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W> Copy for Handle<W> {}

impl<W> PartialEq for Handle<W> {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl<W> Eq for Handle<W> {}

impl<W> std::fmt::Debug for Handle<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle({:p})", self.0)
    }
}

// SAFETY: a handle is an address; every dereference is `unsafe` and keeps
// the module's argument whichever thread makes it. The wrappers' shared
// state is behind locks and atomics.
unsafe impl<W> Send for Handle<W> {}
// SAFETY: as above.
unsafe impl<W> Sync for Handle<W> {}

impl<W: CObject> Handle<W> {
    /// Boxes `w`; it lives until [`Handle::free`].
    pub fn new(w: W) -> Handle<W> {
        let p = Box::into_raw(Box::new(w));
        // SAFETY: `Box::into_raw` never returns NULL.
        Handle(unsafe { NonNull::new_unchecked(p) })
    }

    /// The pointer the program holds, with the wrapper's provenance.
    pub fn to_c(self) -> *mut W::C {
        // SAFETY: `OFFSET` is inside the wrapper (`CObject`'s contract).
        unsafe { self.0.as_ptr().byte_add(W::OFFSET) }.cast()
    }

    /// The handle behind `p`; `None` if `p` is NULL.
    ///
    /// # Safety
    /// `p` is NULL or came from [`Handle::to_c`] of a `Handle<W>` (its
    /// wrapper need not be alive: only [`Handle::get`] needs that).
    pub unsafe fn from_c(p: *mut W::C) -> Option<Handle<W>> {
        let p = NonNull::new(p)?;
        // SAFETY: `p` is `OFFSET` bytes into a wrapper (the caller's
        // promise), so the step back stays inside its allocation.
        Some(Handle(unsafe { p.byte_sub(W::OFFSET) }.cast()))
    }

    /// The wrapper.
    ///
    /// # Safety
    /// The wrapper is not freed for `'a`.
    pub unsafe fn get<'a>(self) -> &'a W {
        // SAFETY: live (the caller's promise); shared references only, and
        // the parts others write are `CPart`s, atomics or behind locks.
        unsafe { self.0.as_ref() }
    }

    /// A handle to no wrapper, for tests that only compare handles.
    #[cfg(test)]
    pub fn dangling() -> Handle<W> {
        Handle(NonNull::dangling())
    }

    /// Frees the wrapper.
    ///
    /// # Safety
    /// The wrapper is alive, freed once, and no reference to it or use of
    /// this handle follows.
    pub unsafe fn free(self) {
        // SAFETY: made by `Box::into_raw` in `new`, freed once.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// Under Miri (`cargo +nightly miri test -p roce-ibverbs --lib`): the
/// conversions keep provenance, the C part may be written while the
/// wrapper is borrowed, and a freed wrapper is never reached.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{ibv_context, ibv_qp, verbs_context};
    use std::mem::offset_of;

    /// Shaped like `ContextObj`: the program's pointer is inside the C part.
    #[repr(C)]
    struct Ctx {
        vctx: CPart<verbs_context>,
        payload: u64,
    }
    c_object!(Ctx, vctx: verbs_context, ibv_context, offset_of!(verbs_context, context));

    /// Shaped like `QpObj`.
    #[repr(C)]
    struct Qp {
        ibv: CPart<ibv_qp>,
        payload: std::sync::Mutex<u64>,
    }
    c_object!(Qp, ibv: ibv_qp);

    fn zeroed<T>() -> T {
        // SAFETY: the ABI structures are integers and nullable pointers
        // (function pointers as `Option`), for which zero is valid.
        unsafe { std::mem::zeroed() }
    }

    #[test]
    fn the_programs_pointer_reaches_the_whole_wrapper() {
        let h = Handle::new(Ctx { vctx: CPart::new(zeroed()), payload: 7 });
        let c: *mut ibv_context = h.to_c();
        // The program writes its structure through its pointer.
        // SAFETY: `c` points to the live context.
        unsafe { (*c).num_comp_vectors = 3 };
        // SAFETY: `c` came from `to_c`; the wrapper is alive until freed.
        let back = unsafe { Handle::<Ctx>::from_c(c) }.unwrap();
        assert_eq!(back, h);
        // SAFETY: alive.
        let w = unsafe { back.get() };
        assert_eq!(w.payload, 7, "the wrapper's own fields, read through the program's pointer");
        // SAFETY: the C part, read through its raw pointer.
        assert_eq!(unsafe { (*w.vctx.get()).context.num_comp_vectors }, 3);
        // SAFETY: alive, freed once, not used again.
        unsafe { back.free() };
    }

    #[test]
    fn the_c_part_may_change_while_the_wrapper_is_borrowed() {
        let h = Handle::new(Qp { ibv: CPart::new(zeroed()), payload: std::sync::Mutex::new(1) });
        let c = h.to_c();
        // SAFETY: alive.
        let q: &Qp = unsafe { h.get() };
        // The library's write of `state` (ibv_modify_qp) and the program's
        // of `qp_context`, both while `q` is held and used afterwards.
        // SAFETY: `c` points to the live QP's C part.
        unsafe {
            (*q.ibv.get()).state = 3;
            (*c).qp_context = std::ptr::without_provenance_mut(0x1234);
        }
        *q.payload.lock().unwrap() += 1;
        // SAFETY: the C part, read through its raw pointer.
        assert_eq!(unsafe { ((*q.ibv.get()).state, (*c).qp_context as usize) }, (3, 0x1234));
        assert_eq!(*q.payload.lock().unwrap(), 2);
        // SAFETY: alive, freed once, `q` not used again.
        unsafe { h.free() };
    }

    #[test]
    fn null_is_no_handle() {
        // SAFETY: NULL is allowed.
        assert!(unsafe { Handle::<Qp>::from_c(std::ptr::null_mut()) }.is_none());
    }
}
