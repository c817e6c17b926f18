// pt2rt for C#: P/Invoke over the C API (<pt2rt/pt2rt_c.h>), in the shape a Unity native plugin uses. Handles are
// SafeHandles (freed by Dispose or, failing that, the finalizer); a failed call throws Pt2rtException with the
// status and pt2rt_last_error()'s message. libpt2rt.so (and the libraries next to it) must be where the platform's
// loader finds native plugins: Unity's Plugins folder, or LD_LIBRARY_PATH for Mono/.NET on Linux.
//
//   using (var rt = Pt2rt.Runtime.Load("model.pt2"))
//   using (var outputs = rt.Run(new Pt2rt.Input(pixels, new long[] {1, 3, 224, 224})))
//       float[] logits = outputs[0].ToArray<float>();
using System;
using System.Runtime.InteropServices;

namespace Pt2rt
{
    public enum Status { Ok = 0, Usage = 2, Package = 3, OpsLibrary = 4, Input = 5, IO = 6, Runtime = 7 }

    public enum DType { Float32, Float64, Float16, BFloat16, Int64, Int32, Int16, Int8, UInt8, Bool }

    public class Pt2rtException : Exception
    {
        public Status Status { get; }
        public Pt2rtException(Status status, string message) : base(message) { Status = status; }
    }

    internal static class Native
    {
        const string Lib = "pt2rt";
        public const uint CApiVersion = 1;  // PT2RT_C_API_VERSION this file was written for

        [StructLayout(LayoutKind.Sequential)]
        public struct TensorView { public IntPtr Data; public IntPtr Shape; public UIntPtr NDim; public int DType; }

        [DllImport(Lib)] public static extern IntPtr pt2rt_last_error();
        [DllImport(Lib)] public static extern IntPtr pt2rt_version();
        [DllImport(Lib)] public static extern int pt2rt_check_c_api_version(uint headerVersion);
        [DllImport(Lib)] public static extern UIntPtr pt2rt_dtype_size(int dtype);
        [DllImport(Lib)] public static extern int pt2rt_load(
            [MarshalAs(UnmanagedType.LPUTF8Str)] string packagePath, IntPtr[] opsLibraries, UIntPtr nOpsLibraries,
            int numRunners, out RuntimeHandle runtime);
        [DllImport(Lib)] public static extern void pt2rt_runtime_free(IntPtr runtime);
        [DllImport(Lib)] public static extern int pt2rt_run(RuntimeHandle runtime, TensorView[] inputs, UIntPtr nInputs,
            IntPtr[] outputs, UIntPtr outputsCapacity, out UIntPtr nOutputs);
        [DllImport(Lib)] public static extern UIntPtr pt2rt_num_inputs(RuntimeHandle runtime);
        [DllImport(Lib)] public static extern UIntPtr pt2rt_num_outputs(RuntimeHandle runtime);
        [DllImport(Lib)] public static extern int pt2rt_input_spec(RuntimeHandle runtime, UIntPtr index,
            out IntPtr name, out int dtype, out IntPtr shape, out UIntPtr ndim);
        [DllImport(Lib)] public static extern int pt2rt_output_spec(RuntimeHandle runtime, UIntPtr index,
            out IntPtr name, out int dtype, out IntPtr shape, out UIntPtr ndim);
        [DllImport(Lib)] public static extern IntPtr pt2rt_tensor_data(TensorHandle tensor);
        [DllImport(Lib)] public static extern UIntPtr pt2rt_tensor_ndim(TensorHandle tensor);
        [DllImport(Lib)] public static extern IntPtr pt2rt_tensor_shape(TensorHandle tensor);
        [DllImport(Lib)] public static extern int pt2rt_tensor_dtype(TensorHandle tensor);
        [DllImport(Lib)] public static extern UIntPtr pt2rt_tensor_nbytes(TensorHandle tensor);
        [DllImport(Lib)] public static extern void pt2rt_tensor_free(IntPtr tensor);

        public static string Utf8(IntPtr p) { return p == IntPtr.Zero ? null : Marshal.PtrToStringAnsi(p); }

        public static void Check(int status)
        {
            if (status != 0) throw new Pt2rtException((Status)status, Utf8(pt2rt_last_error()));
        }

        public static long[] Longs(IntPtr p, ulong n)
        {
            var result = new long[n];
            if (n > 0) Marshal.Copy(p, result, 0, (int)n);
            return result;
        }
    }

    public sealed class RuntimeHandle : SafeHandle
    {
        public RuntimeHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
        protected override bool ReleaseHandle() { Native.pt2rt_runtime_free(handle); return true; }
    }

    public sealed class TensorHandle : SafeHandle
    {
        public TensorHandle(IntPtr p) : base(IntPtr.Zero, true) { SetHandle(p); }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
        protected override bool ReleaseHandle() { Native.pt2rt_tensor_free(handle); return true; }
    }

    /// <summary>A package input or output as the package's spec describes it (-1 in Shape: a dynamic dim).</summary>
    public struct TensorInfo
    {
        public string Name;
        public DType DType;
        public long[] Shape;
    }

    /// <summary>Borrowed input data: a primitive array (float[], double[], long[], int[], short[], sbyte[],
    /// byte[] (also for Bool: bool[] cannot be pinned), ushort[] for Float16/BFloat16 bits) read as a dense
    /// row-major tensor of this shape.</summary>
    public struct Input
    {
        public Array Data;
        public long[] Shape;
        public DType DType;

        public Input(float[] data, long[] shape) { Data = data; Shape = shape; DType = DType.Float32; }
        public Input(Array data, long[] shape, DType dtype) { Data = data; Shape = shape; DType = dtype; }
    }

    /// <summary>An output, in host memory, owned until Dispose.</summary>
    public sealed class Tensor : IDisposable
    {
        readonly TensorHandle handle;
        public long[] Shape { get; }
        public DType DType { get; }
        public long NBytes { get; }

        internal Tensor(IntPtr p)
        {
            handle = new TensorHandle(p);
            Shape = Native.Longs(Native.pt2rt_tensor_shape(handle), (ulong)Native.pt2rt_tensor_ndim(handle));
            DType = (DType)Native.pt2rt_tensor_dtype(handle);
            NBytes = (long)(ulong)Native.pt2rt_tensor_nbytes(handle);
        }

        /// <summary>A copy of the data as T[] (T's size must be the dtype's: float for Float32, ...).</summary>
        public T[] ToArray<T>() where T : struct
        {
            int size = Marshal.SizeOf(typeof(T));
            if (typeof(T) == typeof(bool)) size = 1;  // C# bool marshals as 4 bytes; its array elements are 1
            if ((ulong)size != (ulong)Native.pt2rt_dtype_size((int)DType))
                throw new Pt2rtException(Status.Usage, "Tensor.ToArray<" + typeof(T).Name + ">: the tensor is " +
                                         DType + ", whose elements are " + Native.pt2rt_dtype_size((int)DType) + " bytes");
            var bytes = new byte[NBytes];
            if (NBytes > 0) Marshal.Copy(Native.pt2rt_tensor_data(handle), bytes, 0, (int)NBytes);
            var result = new T[NBytes / size];
            Buffer.BlockCopy(bytes, 0, result, 0, (int)NBytes);
            return result;
        }

        public void Dispose() { handle.Dispose(); }
    }

    /// <summary>The outputs of one run; disposing it disposes each tensor.</summary>
    public sealed class Outputs : IDisposable
    {
        readonly Tensor[] tensors;
        internal Outputs(Tensor[] tensors) { this.tensors = tensors; }
        public int Count { get { return tensors.Length; } }
        public Tensor this[int i] { get { return tensors[i]; } }
        public void Dispose() { foreach (var t in tensors) t.Dispose(); }
    }

    /// <summary>A loaded package. Run may be called from several threads at once.</summary>
    public sealed class Runtime : IDisposable
    {
        readonly RuntimeHandle handle;
        public TensorInfo[] Inputs { get; }
        public TensorInfo[] Outputs { get; }

        public static string Version { get { return Native.Utf8(Native.pt2rt_version()); } }

        Runtime(RuntimeHandle handle)
        {
            this.handle = handle;
            Inputs = Infos(true);
            Outputs = Infos(false);
        }

        /// <summary>Loads a package; opsLibraries null: the ones its spec names, found as the runtime finds them;
        /// numRunners 0: one model instance.</summary>
        public static Runtime Load(string packagePath, string[] opsLibraries = null, int numRunners = 0)
        {
            Native.Check(Native.pt2rt_check_c_api_version(Native.CApiVersion));
            var ops = opsLibraries ?? new string[0];
            var ptrs = new IntPtr[ops.Length];
            try
            {
                for (int i = 0; i < ops.Length; ++i) ptrs[i] = Utf8Alloc(ops[i]);
                RuntimeHandle h;
                int status = Native.pt2rt_load(packagePath, ptrs, (UIntPtr)ptrs.Length, numRunners, out h);
                if (status != 0) { h.Dispose(); Native.Check(status); }
                return new Runtime(h);
            }
            finally
            {
                foreach (var p in ptrs) if (p != IntPtr.Zero) Marshal.FreeHGlobal(p);
            }
        }

        /// <summary>Validates the inputs against the spec and runs the model.</summary>
        public Outputs Run(params Input[] inputs)
        {
            var pins = new GCHandle[inputs.Length * 2];
            var views = new Native.TensorView[inputs.Length];
            try
            {
                for (int i = 0; i < inputs.Length; ++i)
                {
                    if (inputs[i].Data == null || inputs[i].Shape == null)
                        throw new ArgumentNullException("inputs[" + i + "]", "an input needs Data and Shape");
                    pins[2 * i] = GCHandle.Alloc(inputs[i].Data, GCHandleType.Pinned);
                    pins[2 * i + 1] = GCHandle.Alloc(inputs[i].Shape, GCHandleType.Pinned);
                    views[i].Data = pins[2 * i].AddrOfPinnedObject();
                    views[i].Shape = pins[2 * i + 1].AddrOfPinnedObject();
                    views[i].NDim = (UIntPtr)inputs[i].Shape.Length;
                    views[i].DType = (int)inputs[i].DType;
                }
                var raw = new IntPtr[Outputs.Length];
                UIntPtr n;
                Native.Check(Native.pt2rt_run(handle, views, (UIntPtr)views.Length, raw, (UIntPtr)raw.Length, out n));
                var tensors = new Tensor[(int)n];
                for (int i = 0; i < tensors.Length; ++i) tensors[i] = new Tensor(raw[i]);
                return new Outputs(tensors);
            }
            finally
            {
                foreach (var p in pins) if (p.IsAllocated) p.Free();
            }
        }

        public void Dispose() { handle.Dispose(); }

        TensorInfo[] Infos(bool inputs)
        {
            ulong count = (ulong)(inputs ? Native.pt2rt_num_inputs(handle) : Native.pt2rt_num_outputs(handle));
            var result = new TensorInfo[count];
            for (ulong i = 0; i < count; ++i)
            {
                IntPtr name, shape;
                int dtype;
                UIntPtr ndim;
                Native.Check(inputs ? Native.pt2rt_input_spec(handle, (UIntPtr)i, out name, out dtype, out shape, out ndim)
                                    : Native.pt2rt_output_spec(handle, (UIntPtr)i, out name, out dtype, out shape, out ndim));
                result[i] = new TensorInfo { Name = Native.Utf8(name), DType = (DType)dtype,
                                             Shape = Native.Longs(shape, (ulong)ndim) };
            }
            return result;
        }

        static IntPtr Utf8Alloc(string s)
        {
            if (s == null) throw new ArgumentNullException("opsLibraries", "an ops library path is null");
            var bytes = System.Text.Encoding.UTF8.GetBytes(s);
            var p = Marshal.AllocHGlobal(bytes.Length + 1);
            Marshal.Copy(bytes, 0, p, bytes.Length);
            Marshal.WriteByte(p, bytes.Length, 0);
            return p;
        }
    }
}
