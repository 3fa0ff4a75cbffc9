;;; Indexing: gathers (the principal GATHER), scatters and running reductions (comparisons against
;;; INDEX: a scatter of K indices into an axis of size n compares every index with 0..n-1 and
;;; reduces the matches, O(K n) work with no data-dependent store, so every runtime compiles it).
;;; An out-of-range index reads zero (false for bool) and sends nothing, never faulting.

;;; Gathers read data at data-dependent coordinates (the principal GATHER: an index outside [-n, n)
;;; reads 0); their gradients add each cotangent where it was read (a one-hot over the axis).

(composite take ((X{T}[...] I{U}[...]) -> (Y{T}[...]) &key (axis 0))
  "numpy.take: the slices of X at integer indices I along :axis (negative indices count from the end)"
  (setf ax (axis X axis))
  (setf pre [])
  (dotimes (i ax) (setf pre (append pre [(dim X i)])))
  (setf post [])
  (dotimes (i (- (rank X) (+ ax 1))) (setf post (append post [(dim X (+ ax (+ i 1)))])))
  (setf flat (reshape (cast I i64) [-1]))
  (setf k (dim flat 0))
  (setf iv (expand (reshape flat (append (repeat 1 ax) [k] (repeat 1 (len post)))) (append pre [k] post)))
  (reshape (GATHER X iv :axis ax) (append pre (shape I) post)))

(composite take-along-axis ((X{T}[...] I{U}[...]) -> (Y{T}[...]) &key (axis 0))
  "numpy.take_along_axis: Y[.., j, ..] = X[.., I[.., j, ..], ..] along :axis (I has X's rank; the other axes broadcast)"
  (assert (= (rank X) (rank I)) "take-along-axis: indices need the rank of the data")
  (setf ax (axis X axis))
  ;; the broadcast of the other axes: the shape of a sum of both reduced over :axis (never computed)
  (setf b (shape (ADD (CAST (max X :axis ax :keepdims true) i64) (CAST (max I :axis ax :keepdims true) i64))))
  (setf xs [])
  (setf is [])
  (dotimes (d (rank X))
    (setf xs (append xs [(if (= d ax) (dim X d) (nth b d))]))
    (setf is (append is [(if (= d ax) (dim I d) (nth b d))])))
  (GATHER (expand X xs) (expand (cast I i64) is) :axis ax))

(composite scan-mask ((X{T}[...]) -> (Y{bool}[...]) &key (axis 0) (exclusive false) (reverse false))
  "the [.. n(at :axis) .. n] mask of a running reduction: which source m feeds output j"
  (setf ax (axis X axis))
  (setf r (rank X))
  (setf n (dim X ax))
  (setf ms (append (repeat 1 ax) [n] (repeat 1 (- r (+ ax 1))) [n]))
  (setf j (INDEX ms :axis ax))
  (setf m (INDEX ms :axis r))
  (if reverse
      (if exclusive (CMPLT j m) (not (CMPLT m j)))
      (if exclusive (CMPLT m j) (not (CMPLT j m)))))

(composite cumsum ((X{T}[...]) -> (Y{T}[...]) &key (axis 0) (exclusive false) (reverse false))
  "running sum along :axis (exclusive: without the element itself; reverse: from the end)"
  (setf ax (axis X axis))
  (setf xv (unsqueeze (permute X (append (range 0 ax) (range (+ ax 1) (rank X)) [ax])) ax))
  (sum (WHERE (scan-mask X :axis ax :exclusive exclusive :reverse reverse) xv 0) :axis -1))

(composite cumprod ((X{T}[...]) -> (Y{T}[...]) &key (axis 0) (exclusive false) (reverse false))
  "running product along :axis (exclusive: without the element itself; reverse: from the end)"
  (setf ax (axis X axis))
  (setf xv (unsqueeze (permute X (append (range 0 ax) (range (+ ax 1) (rank X)) [ax])) ax))
  (prod (WHERE (scan-mask X :axis ax :exclusive exclusive :reverse reverse) xv 1) :axis -1))

(composite triu ((X{T}[...]) -> (Y{T}[...]) &key (k 0))
  "the upper triangle of the last two axes: X where column - row >= k, else 0"
  (setf s [(dim X -2) (dim X -1)])
  (WHERE (not (CMPLT (ADD (INDEX s :axis 1) (NEG (INDEX s :axis 0))) k)) X (if (bool? X) false 0)))

(composite tril ((X{T}[...]) -> (Y{T}[...]) &key (k 0))
  "the lower triangle of the last two axes: X where column - row <= k, else 0"
  (setf s [(dim X -2) (dim X -1)])
  (WHERE (not (CMPLT k (ADD (INDEX s :axis 1) (NEG (INDEX s :axis 0))))) X (if (bool? X) false 0)))

;;; Scatters (torch.scatter / scatter_reduce along an axis): every position p of I sends S[p] to
;;; Y[p with :axis replaced by I[p]]. Written, like the gathers, as a one-hot over the axis: the
;;; [I's dims with :axis last, n] comparison of each index with 0..n-1, reduced over I's :axis,
;;; then put back in X's layout. S has I's shape; an index outside [-n, n) sends nothing.

(composite scatter-hits ((X{T}[...] I{U}[...]) -> (H{bool}[...]) &key (axis 0))
  "the one-hot [dims of I with :axis moved last, n]: where each index of I lands along X's :axis"
  (setf ax (axis X axis))
  (setf r (rank X))
  (setf n (dim X ax))
  (setf ii (cast I i64))
  (setf last (permute (WHERE (CMPLT ii 0) (ADD ii n) ii) (append (range 0 ax) (range (+ ax 1) r) [ax])))
  (= (INDEX (append (shape last) [n]) :axis r) (unsqueeze last -1)))

(composite scatter-source ((S{T}[...]) -> (V{T}[...]) &key (axis 0))
  "S with :axis moved last and a unit axis after it, to meet scatter-hits"
  (setf ax (axis S axis))
  (unsqueeze (permute S (append (range 0 ax) (range (+ ax 1) (rank S)) [ax])) -1))

(composite scatter-place ((X{T}[...] C{U}[...]) -> (Y{U}[...]) &key (axis 0) (value 0))
  "C (scatter-hits' layout, I's :axis reduced away) in X's layout: :axis home, the other axes padded to X's sizes with :value"
  (setf ax (axis X axis))
  (setf r (rank X))
  (setf back (permute C (append (range 0 ax) [(- r 1)] (range ax (- r 1)))))
  (setf w [])
  (dotimes (d r) (setf w (append w [[0 (- (dim X d) (dim back d))]])))
  (pad back w :value value))

(composite scatter-count ((X{T}[...] I{U}[...]) -> (N{i64}[...]) &key (axis 0))
  "how many indices of I land on each element of X along :axis"
  (setf h (scatter-hits X I :axis axis))
  (scatter-place X (sum (cast h i64) :axis (- (rank X) 1)) :axis axis))

(composite scatter-add ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...]) &key (axis 0))
  "torch.scatter_add: Y = X, then Y[.., I[p], ..] += S[p] for every position p of I"
  (setf h (scatter-hits X I :axis axis))
  (+ X (scatter-place X (sum (WHERE h (scatter-source S :axis axis) 0) :axis (- (rank X) 1)) :axis axis)))

(composite scatter ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...]) &key (axis 0))
  "torch.scatter: Y = X, then Y[.., I[p], ..] = S[p]; of indices that repeat, the last along :axis wins (torch's CPU order)"
  (setf r (rank X))
  (setf h (scatter-hits X I :axis axis))
  (setf k (ADD (INDEX (shape h) :axis (- r 1)) 1))
  (setf last (max (WHERE h k 0) :axis (- r 1) :keepdims true))
  (setf win (and h (= k last)))
  (setf sv (scatter-source S :axis axis))
  (setf v (if (bool? X) (max (WHERE win sv false) :axis (- r 1)) (sum (WHERE win sv 0) :axis (- r 1))))
  (WHERE (scatter-place X (< 0 (squeeze last (- r 1))) :axis axis :value false) (scatter-place X v :axis axis) X))

(composite scatter-extreme ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...] A{bool}[...]) &key (axis 0) (largest true))
  "the max (:largest) or min of the sources landing on each element of X, and whether any lands (an empty I lands nowhere)"
  (setf r (rank X))
  ;; one more slot, where nothing lands, so no reduction is over an empty axis (and an empty I works)
  (setf w (append (repeat [0 0] (- r 1)) [[0 1] [0 0]]))
  (setf h (pad (scatter-hits X I :axis axis) w :value false))
  (setf sv (pad (scatter-source S :axis axis) w))
  (setf any (scatter-place X (max h :axis (- r 1)) :axis axis :value false))
  ;; the min is the max in reversed order (NEG for floats, NOT for integers and bool: both exact),
  ;; and where nothing lands, the lowest value of the dtype (unused there)
  (setf v (if largest sv (if (float? S) (NEG sv) (NOT sv))))
  (setf zero (CONST 0 :dtype T :shape []))
  (setf low (if (float? S) -inf
                (if (bool? S) false (where (< (- zero 1) zero) (shl (+ zero 1) (+ zero (- (bits S) 1))) zero))))
  (setf m (max (where h v low) :axis (- r 1)))
  (return (scatter-place X (if largest m (if (float? S) (NEG m) (NOT m))) :axis axis) any))

(composite gather ((X{T}[...] I{U}[...]) -> (Y{T}[...]) &key (axis 0))
  "torch.gather: Y[p] = X[p with :axis replaced by I[p]]; I has X's rank and is no larger off :axis (an index outside [-n, n) reads 0)"
  (GATHER X (cast I i64) :axis (axis X axis)))

(composite scatter-extreme-vjp ((X{T}[...] I{U}[...] S{T}[...] Y{T}[...] dY{T}[...]) -> (dX{T}[...] dS{T}[...])
                                &key (axis 0) (include-self true))
  "torch's scatter_reduce amax/amin gradient: dY shared evenly by X (where it equals Y) and every source equal to Y"
  (setf own (cast (= X Y) (dtype X)))
  (setf hit (cast (= S (gather Y I :axis axis)) (dtype X)))
  (setf share (/ dY (scatter-add own I hit :axis axis)))
  (setf gx (* own share))
  (return (if include-self gx (WHERE (< 0 (scatter-count X I :axis axis)) 0 gx))
          (* hit (gather share I :axis axis))))

(composite scatter-max ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...]) &key (axis 0) (include-self true))
  "torch.scatter_reduce amax: the maximum of the sources landing on each element (and X's own with :include-self); nan propagates"
  :vjp ((dY)
        (setf g (scatter-extreme-vjp X I S Y dY :axis axis :include-self include-self))
        (return (nth g 0) nil (nth g 1)))
  (setf e (scatter-extreme X I S :axis axis :largest true))
  (WHERE (nth e 1) (if include-self (MAX X (nth e 0)) (nth e 0)) X))

(composite scatter-min ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...]) &key (axis 0) (include-self true))
  "torch.scatter_reduce amin: the minimum of the sources landing on each element (and X's own with :include-self); nan propagates"
  :vjp ((dY)
        (setf g (scatter-extreme-vjp X I S Y dY :axis axis :include-self include-self))
        (return (nth g 0) nil (nth g 1)))
  (setf e (scatter-extreme X I S :axis axis :largest false))
  (setf m (nth e 0))
  (WHERE (nth e 1)
         (if include-self
             (if (float? X) (NEG (MAX (NEG X) (NEG m))) (WHERE (CMPLT m X) m X))
             m)
         X))

(composite scatter-mul ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...]) &key (axis 0) (include-self true))
  "torch.scatter_reduce prod: the product of the sources landing on each element (times X's own with :include-self)"
  (setf r (rank X))
  (setf h (scatter-hits X I :axis axis))
  (setf p (scatter-place X (prod (WHERE h (scatter-source S :axis axis) 1) :axis (- r 1)) :axis axis :value 1))
  (if include-self (* X p) (WHERE (< 0 (scatter-count X I :axis axis)) p X)))
