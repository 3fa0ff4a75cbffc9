;;; Collectives across the processes of torch.distributed's default group (docs/language.md section 13,
;;; docs/distributed.md): each is an EXTERN kernel the host runs between compiled kernels, on the
;;; runtime's buffers. In a single process (no group) each is the identity. The world size is bound
;;; when the program is compiled (all-gather's and reduce-scatter's output shapes depend on it).

(composite all-reduce ((X{T}[...]) -> (Y{T}[...]) &key (op "sum"))
  "every process gets :op (sum, mean, max or min) of X over the group; mean is for floats, max/min of bool are any/all; gradient (sum, mean): the same all-reduce of the cotangent"
  (EXTERN "all-reduce" X :reduce op))

(composite all-gather ((X{T}[...]) -> (Y{T}[...]) &key (axis 0) (world nil))
  "the processes' X concatenated along :axis in rank order (:world, the group size compiled for: default the current group's); gradient: reduce-scatter sum"
  (EXTERN "all-gather" X :axis axis :world world))

(composite reduce-scatter ((X{T}[...]) -> (Y{T}[...]) &key (axis 0) (op "sum") (world nil))
  ":op of X over the group, cut along :axis (a multiple of the world size) into equal parts: this rank's part (:world as all-gather's); gradient (sum, mean): all-gather"
  (EXTERN "reduce-scatter" X :axis axis :reduce op :world world))

(composite broadcast ((X{T}[...]) -> (Y{T}[...]) &key (root 0))
  "rank :root's X on every process; gradient: the cotangents' sum on the root, zeros elsewhere"
  (EXTERN "broadcast" X :root root))

(composite grad-all-reduce ((X{T}[...]) -> (Y{T}[...]) &key (op "sum"))
  "X itself; its gradient is all-reduced with :op (sum or mean): data parallel's gradient averaging, Megatron's f before a column-parallel layer"
  :vjp ((dY) (EXTERN "all-reduce" dY :reduce op))
  (COPY X))

(composite all-reduce-replicated ((X{T}[...]) -> (Y{T}[...]))
  "the all-reduce sum of X, whose gradient is the cotangent itself: for a value every rank then uses alike (Megatron's g after a row-parallel layer: the loss counted once, not once per rank)"
  :vjp ((dY) dY)
  (EXTERN "all-reduce" X :reduce "sum"))
