// pt2rt for C#: P/Invoke over the C API (<pt2rt/pt2rt_c.h>), in the shape a Unity native plugin uses. Handles are
// SafeHandles (freed by Dispose or, failing that, the finalizer); a failed call throws Pt2rtException with the
// status and pt2rt_last_error()'s message. libpt2rt.so (and the libraries next to it) must be where the platform's
// loader finds native plugins: Unity's Plugins folder, or LD_LIBRARY_PATH for Mono/.NET on Linux.
//
//   using (var rt = Pt2rt.Runtime.Load("model.pt2", new Pt2rt.Options { IntraOpThreads = 2 }))
//   using (var outputs = rt.Run(new Pt2rt.Input(pixels, new long[] {1, 3, 224, 224})))
//   {
//       float[] logits = outputs[0].ToArray<float>();
//   }
//
// A game loop: the package from an asset's bytes, outputs written into arrays it reuses every frame.
//   var rt = Pt2rt.Runtime.LoadFromMemory(asset.bytes, new Pt2rt.Options { NumRunners = 2 });
//   rt.RunInto(new[] { new Pt2rt.Input(pixels, inShape) }, new[] { new Pt2rt.Output(logits, outShape) });
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
        public const uint CApiVersion = 4;  // PT2RT_C_API_VERSION this file was written for

        [StructLayout(LayoutKind.Sequential)]
        public struct TensorView { public IntPtr Data; public IntPtr Shape; public UIntPtr NDim; public int DType; }

        [DllImport(Lib)] public static extern int pt2rt_options_create(out OptionsHandle options);
        [DllImport(Lib)] public static extern void pt2rt_options_free(IntPtr options);
        [DllImport(Lib)] public static extern int pt2rt_options_set_cpu_isa(OptionsHandle options,
            [MarshalAs(UnmanagedType.LPUTF8Str)] string isa);
        [DllImport(Lib)] public static extern int pt2rt_options_set_num_runners(OptionsHandle options, int numRunners);
        [DllImport(Lib)] public static extern int pt2rt_options_add_ops_library(OptionsHandle options,
            [MarshalAs(UnmanagedType.LPUTF8Str)] string path);
        [DllImport(Lib)] public static extern int pt2rt_options_set_ops_from_package_dir(OptionsHandle options, int enabled);
        [DllImport(Lib)] public static extern int pt2rt_options_set_check_torch_version(OptionsHandle options, int enabled);
        [DllImport(Lib)] public static extern int pt2rt_options_set_check_sha256(OptionsHandle options, int enabled);
        [DllImport(Lib)] public static extern int pt2rt_options_set_keep_package_open(OptionsHandle options, int enabled);
        [DllImport(Lib)] public static extern int pt2rt_options_set_reuse_run_memory(OptionsHandle options, int enabled);
        [DllImport(Lib)] public static extern int pt2rt_options_set_intra_op_threads(OptionsHandle options, int threads);
        [DllImport(Lib)] public static extern int pt2rt_options_set_device_index(OptionsHandle options, int deviceIndex);
        [DllImport(Lib)] public static extern int pt2rt_options_set_max_record_bytes(OptionsHandle options, ulong bytes);
        [DllImport(Lib)] public static extern int pt2rt_options_set_max_metadata_bytes(OptionsHandle options, ulong bytes);
        [DllImport(Lib)] public static extern int pt2rt_options_set_max_extracted_bytes(OptionsHandle options, ulong bytes);
        [DllImport(Lib)] public static extern int pt2rt_load_with_options(
            [MarshalAs(UnmanagedType.LPUTF8Str)] string packagePath, OptionsHandle options, out RuntimeHandle runtime);
        [DllImport(Lib)] public static extern int pt2rt_load_from_memory(byte[] bytes, UIntPtr size, OptionsHandle options,
            out RuntimeHandle runtime);
        [DllImport(Lib)] public static extern int pt2rt_run_into(RuntimeHandle runtime, TensorView[] inputs,
            UIntPtr nInputs, TensorView[] outputs, UIntPtr nOutputs);

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

    public sealed class OptionsHandle : SafeHandle
    {
        public OptionsHandle() : base(IntPtr.Zero, true) { }
        public override bool IsInvalid { get { return handle == IntPtr.Zero; } }
        protected override bool ReleaseHandle() { Native.pt2rt_options_free(handle); return true; }
    }

    /// <summary>How to load a package (the C API's pt2rt_options); a new Options holds the library's defaults.</summary>
    public sealed class Options
    {
        /// <summary>The CPU variant to load ("avx2", ...); null: the best this CPU runs.</summary>
        public string CpuIsa;
        /// <summary>Model instances for concurrent runs, 1..1024.</summary>
        public int NumRunners = 1;
        /// <summary>Ops libraries to load first; null or empty: the ones the spec names.</summary>
        public string[] OpsLibraries;
        public bool OpsFromPackageDir = false;
        public bool CheckTorchVersion = true;
        public bool CheckSha256 = true;
        /// <summary>Keep the package file (from memory: its golden cases) for the runtime's life.</summary>
        public bool KeepPackageOpen = true;
        /// <summary>Runs reuse the memory earlier runs freed: RunInto of fixed shapes allocates nothing once warm.</summary>
        public bool ReuseRunMemory = false;
        /// <summary>Intra-op threads of each run, 1..1024 (0: the process-wide count, pt2rt_set_num_threads).</summary>
        public int IntraOpThreads = 0;
        /// <summary>CUDA packages: the device; -1: the current one.</summary>
        public int DeviceIndex = -1;
        /// <summary>Bounds on what a package may make a load read (0: the library's).</summary>
        public ulong MaxRecordBytes, MaxMetadataBytes, MaxExtractedBytes;

        internal OptionsHandle ToNative()
        {
            Native.Check(Native.pt2rt_check_c_api_version(Native.CApiVersion));
            OptionsHandle h;
            Native.Check(Native.pt2rt_options_create(out h));
            try
            {
                if (CpuIsa != null) Native.Check(Native.pt2rt_options_set_cpu_isa(h, CpuIsa));
                Native.Check(Native.pt2rt_options_set_num_runners(h, NumRunners));
                foreach (var lib in OpsLibraries ?? new string[0]) Native.Check(Native.pt2rt_options_add_ops_library(h, lib));
                Native.Check(Native.pt2rt_options_set_ops_from_package_dir(h, OpsFromPackageDir ? 1 : 0));
                Native.Check(Native.pt2rt_options_set_check_torch_version(h, CheckTorchVersion ? 1 : 0));
                Native.Check(Native.pt2rt_options_set_check_sha256(h, CheckSha256 ? 1 : 0));
                Native.Check(Native.pt2rt_options_set_keep_package_open(h, KeepPackageOpen ? 1 : 0));
                Native.Check(Native.pt2rt_options_set_reuse_run_memory(h, ReuseRunMemory ? 1 : 0));
                Native.Check(Native.pt2rt_options_set_intra_op_threads(h, IntraOpThreads));
                Native.Check(Native.pt2rt_options_set_device_index(h, DeviceIndex));
                if (MaxRecordBytes != 0) Native.Check(Native.pt2rt_options_set_max_record_bytes(h, MaxRecordBytes));
                if (MaxMetadataBytes != 0) Native.Check(Native.pt2rt_options_set_max_metadata_bytes(h, MaxMetadataBytes));
                if (MaxExtractedBytes != 0) Native.Check(Native.pt2rt_options_set_max_extracted_bytes(h, MaxExtractedBytes));
                return h;
            }
            catch
            {
                h.Dispose();
                throw;
            }
        }
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

    /// <summary>An array of the caller that RunInto writes an output into (dense, row-major, the output's shape;
    /// element types as for Input).</summary>
    public struct Output
    {
        public Array Data;
        public long[] Shape;
        public DType DType;

        public Output(float[] data, long[] shape) { Data = data; Shape = shape; DType = DType.Float32; }
        public Output(Array data, long[] shape, DType dtype) { Data = data; Shape = shape; DType = dtype; }
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

        /// <summary>Loads a package with options (null: the defaults).</summary>
        public static Runtime Load(string packagePath, Options options)
        {
            using (var o = (options ?? new Options()).ToNative())
            {
                RuntimeHandle h;
                int status = Native.pt2rt_load_with_options(packagePath, o, out h);
                if (status != 0) { h.Dispose(); Native.Check(status); }
                return new Runtime(h);
            }
        }

        /// <summary>Loads a package from its bytes (an asset, a download); the array may be reused once this
        /// returns.</summary>
        public static Runtime LoadFromMemory(byte[] bytes, Options options = null)
        {
            if (bytes == null) throw new ArgumentNullException("bytes", "the package's bytes are null");
            using (var o = (options ?? new Options()).ToNative())
            {
                RuntimeHandle h;
                int status = Native.pt2rt_load_from_memory(bytes, (UIntPtr)bytes.Length, o, out h);
                if (status != 0) { h.Dispose(); Native.Check(status); }
                return new Runtime(h);
            }
        }

        // Pins an array and its shape as a view; the pins are freed by the caller.
        static Native.TensorView Pin(Array data, long[] shape, DType dtype, string who, GCHandle[] pins, int at)
        {
            if (data == null || shape == null) throw new ArgumentNullException(who, "needs Data and Shape");
            pins[at] = GCHandle.Alloc(data, GCHandleType.Pinned);
            pins[at + 1] = GCHandle.Alloc(shape, GCHandleType.Pinned);
            return new Native.TensorView { Data = pins[at].AddrOfPinnedObject(), Shape = pins[at + 1].AddrOfPinnedObject(),
                                           NDim = (UIntPtr)shape.Length, DType = (int)dtype };
        }

        /// <summary>Validates the inputs against the spec and runs the model.</summary>
        public Outputs Run(params Input[] inputs)
        {
            var pins = new GCHandle[inputs.Length * 2];
            var views = new Native.TensorView[inputs.Length];
            try
            {
                for (int i = 0; i < inputs.Length; ++i)
                    views[i] = Pin(inputs[i].Data, inputs[i].Shape, inputs[i].DType, "inputs[" + i + "]", pins, 2 * i);
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

        /// <summary>Runs the model and writes output i into outputs[i] (arrays reused across runs); a
        /// Pt2rtException (Usage), with nothing written, when an array does not fit its output.</summary>
        public void RunInto(Input[] inputs, Output[] outputs)
        {
            if (inputs == null || outputs == null) throw new ArgumentNullException(inputs == null ? "inputs" : "outputs");
            var pins = new GCHandle[(inputs.Length + outputs.Length) * 2];
            var ins = new Native.TensorView[inputs.Length];
            var outs = new Native.TensorView[outputs.Length];
            try
            {
                for (int i = 0; i < inputs.Length; ++i)
                    ins[i] = Pin(inputs[i].Data, inputs[i].Shape, inputs[i].DType, "inputs[" + i + "]", pins, 2 * i);
                for (int i = 0; i < outputs.Length; ++i)
                {
                    var o = outputs[i];
                    if (o.Data == null || o.Shape == null) throw new ArgumentNullException("outputs[" + i + "]", "needs Data and Shape");
                    ulong need = (ulong)Native.pt2rt_dtype_size((int)o.DType);
                    foreach (var d in o.Shape) need = d < 0 ? ulong.MaxValue : need * (ulong)d;
                    if (need != (ulong)Buffer.ByteLength(o.Data))
                        throw new Pt2rtException(Status.Usage, "outputs[" + i + "]: shape [" + string.Join(", ", o.Shape) +
                                                 "] of " + o.DType + " needs " + need + " bytes, the array has " +
                                                 Buffer.ByteLength(o.Data));
                    outs[i] = Pin(o.Data, o.Shape, o.DType, "outputs[" + i + "]", pins, 2 * (inputs.Length + i));
                }
                Native.Check(Native.pt2rt_run_into(handle, ins, (UIntPtr)ins.Length, outs, (UIntPtr)outs.Length));
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
