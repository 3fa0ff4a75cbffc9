;;; Indexing: gathers (the principal GATHER), scatters (the principal SCATTER) and running
;;; reductions. A gather or scatter of K indices costs O(K) loads or read-modify-writes.
;;; An out-of-range index reads zero (false for bool) and sends nothing, never faulting.

;;; Gathers read data at data-dependent coordinates (the principal GATHER: an index outside [-n, n)
;;; reads 0); their gradients add each cotangent where it was read (a SCATTER add).

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
;;; Y[p with :axis replaced by I[p]], through the principal SCATTER (one read-modify-write per
;;; index, in I's row-major order). S has I's shape; an index outside [-n, n) sends nothing.

(composite scatter-count ((X{T}[...] I{U}[...]) -> (N{i64}[...]) &key (axis 0))
  "how many indices of I land on each element of X along :axis"
  (SCATTER (CONST 0 :dtype i64 :shape (shape X)) (cast I i64) (CONST 1 :dtype i64 :shape (shape I)) :axis (axis X axis) :op add))

(composite scatter-add ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...]) &key (axis 0))
  "torch.scatter_add: Y = X, then Y[.., I[p], ..] += S[p] for every position p of I (in order: a float sum in I's row-major order)"
  (SCATTER X (cast I i64) S :axis (axis X axis) :op add))

(composite scatter ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...]) &key (axis 0))
  "torch.scatter: Y = X, then Y[.., I[p], ..] = S[p]; of indices that repeat, the last along :axis wins (torch's CPU order)"
  (SCATTER X (cast I i64) S :axis (axis X axis) :op set))

(composite scatter-extreme ((X{T}[...] I{U}[...] S{T}[...]) -> (Y{T}[...] A{bool}[...]) &key (axis 0) (largest true))
  "the max (:largest) or min of the sources landing on each element of X, and whether any lands (an empty I lands nowhere)"
  ;; from the dtype's lowest (highest) value, which every source beats; where nothing lands, unused
  (setf zero (CONST 0 :dtype T :shape []))
  (setf low (if (float? S) -inf
                (if (bool? S) false (where (< (- zero 1) zero) (shl (+ zero 1) (+ zero (- (bits S) 1))) zero))))
  (setf base (expand (cast (if largest low (if (float? S) (NEG low) (NOT low))) (dtype X)) (shape X)))
  (setf ax (axis X axis))
  (return (if largest (SCATTER base (cast I i64) S :axis ax :op max) (SCATTER base (cast I i64) S :axis ax :op min))
          (< 0 (scatter-count X I :axis axis))))

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
  (setf ax (axis X axis))
  (if include-self
      (SCATTER X (cast I i64) S :axis ax :op mul)
      (WHERE (< 0 (scatter-count X I :axis axis))
             (SCATTER (expand (cast 1 (dtype X)) (shape X)) (cast I i64) S :axis ax :op mul)
             X)))

;;; Sorting (the principal SORT: a stable merge sort per line, nan last ascending and first descending,
;;; as torch's sort with stable=True); the values are a GATHER at the order, so gradients flow to the
;;; elements picked.

(composite argsort ((X{T}[...]) -> (I{i64}[...]) &key (axis -1) (descending false))
  "torch.argsort(stable=True): the indices that sort X along :axis (ties keep their order)"
  (if (= (rank X) 0) (CONST 0 :dtype i64) (SORT X :axis (axis X axis) :descending descending)))

(composite sort ((X{T}[...]) -> (Y{T}[...] I{i64}[...]) &key (axis -1) (descending false))
  "torch.sort(stable=True): X sorted along :axis, and the indices it came from"
  (if (= (rank X) 0)
      (return X (CONST 0 :dtype i64))
      (let ((ax (axis X axis))
            (i (SORT X :axis ax :descending descending)))
        (return (GATHER X i :axis ax) i))))

(composite topk ((X{T}[...] k) -> (Y{T}[...] I{i64}[...]) &key (axis -1) (largest true))
  "torch.topk(sorted=True): the k largest (smallest without :largest) along :axis, in order, and their indices"
  (if (= (rank X) 0)
      (return X (CONST 0 :dtype i64))
      (let ((ax (axis X axis)))
        (setf w [])
        (dotimes (d (rank X)) (setf w (append w [(if (= d ax) [0 k] [0 (dim X d)])])))
        (setf i (VIEW (SORT X :axis ax :descending largest) :shrink w))
        (return (GATHER X i :axis ax) i))))
