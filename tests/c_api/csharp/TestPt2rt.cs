// bindings/csharp/Pt2rt.cs under Mono, used as a Unity script would: load, introspect, run, read outputs, errors as
// exceptions, handles disposed. Prints the checksum of 60 frames of the example model (the calling script compares
// it with the eager model's).
//   mono TestPt2rt.exe PACKAGES_DIR OPS_LIBRARY
using System;
using System.Threading;

static class TestPt2rt
{
    static int failures = 0;

    static void Check(bool ok, string what)
    {
        if (!ok) { Console.Error.WriteLine("CHECK failed: " + what); ++failures; }
    }

    static Pt2rt.Pt2rtException Throws(Action action)
    {
        try { action(); }
        catch (Pt2rt.Pt2rtException e) { return e; }
        return null;
    }

    static float[] Frame(int f)
    {
        var x = new float[3 * 32 * 32];
        for (int i = 0; i < x.Length; ++i) x[i] = (float)Math.Sin(0.001 * (i + f));
        return x;
    }

    static int Main(string[] args)
    {
        if (args.Length != 2) { Console.Error.WriteLine("usage: TestPt2rt.exe PACKAGES_DIR OPS_LIBRARY"); return 2; }
        string dir = args[0];
        var ops = new[] { args[1] };
        Check(Pt2rt.Runtime.Version.Length > 0, "Version");

        var e = Throws(() => Pt2rt.Runtime.Load(dir + "/no-such.pt2", ops).Dispose());
        Check(e != null && e.Status == Pt2rt.Status.Package && e.Message.Contains("no-such.pt2"), "missing package");
        e = Throws(() => Pt2rt.Runtime.Load(null, ops).Dispose());
        Check(e != null && e.Status == Pt2rt.Status.Usage, "null path");
        e = Throws(() => Pt2rt.Runtime.Load(dir + "/op_static.pt2", new[] { "/nonexistent/libnothing.so" }).Dispose());
        Check(e != null && e.Status == Pt2rt.Status.OpsLibrary, "missing ops library");

        // The op-only package is the identity.
        using (var rt = Pt2rt.Runtime.Load(dir + "/op_static.pt2", ops))
        {
            Check(rt.Inputs.Length == 1 && rt.Inputs[0].Name == "x" && rt.Inputs[0].DType == Pt2rt.DType.Float32,
                  "op_static inputs");
            long[] shape = rt.Inputs[0].Shape;
            long n = 1;
            foreach (var d in shape) n *= d;
            var x = new float[n];
            for (int i = 0; i < n; ++i) x[i] = i * 0.25f - 7f;
            using (var outputs = rt.Run(new Pt2rt.Input(x, shape)))
            {
                Check(outputs.Count == 1, "one output");
                float[] y = outputs[0].ToArray<float>();
                bool same = y.Length == x.Length;
                for (int i = 0; same && i < y.Length; ++i) same = y[i] == x[i];
                Check(same, "identity output");
                Check(Throws(() => outputs[0].ToArray<double>()) != null, "ToArray of the wrong element size");
            }
            var bad = (long[])shape.Clone();
            bad[2] += 1;
            e = Throws(() => rt.Run(new Pt2rt.Input(x, bad)).Dispose());
            Check(e != null && e.Status == Pt2rt.Status.Input && e.Message.Length > 0, "wrong shape: " + e);
            e = Throws(() => rt.Run(new Pt2rt.Input(new int[n], shape, Pt2rt.DType.Int32)).Dispose());
            Check(e != null && e.Status == Pt2rt.Status.Input, "wrong dtype");
        }

        // The example model from 4 threads, then the checksum.
        using (var rt = Pt2rt.Runtime.Load(dir + "/net_dynamic.pt2", ops, 2))
        {
            Check(rt.Inputs[0].Shape[0] == -1, "dynamic batch is -1");
            var shape = new long[] { 1, 3, 32, 32 };
            float[] expected;
            using (var o = rt.Run(new Pt2rt.Input(Frame(5), shape))) expected = o[0].ToArray<float>();
            int mismatches = 0;
            var threads = new Thread[4];
            for (int t = 0; t < threads.Length; ++t)
            {
                threads[t] = new Thread(() =>
                {
                    for (int i = 0; i < 20; ++i)
                        using (var o = rt.Run(new Pt2rt.Input(Frame(5), shape)))
                        {
                            float[] y = o[0].ToArray<float>();
                            for (int k = 0; k < y.Length; ++k)
                                if (Math.Abs(y[k] - expected[k]) > 1e-5f * (1f + Math.Abs(expected[k])))
                                { Interlocked.Increment(ref mismatches); break; }
                        }
                });
                threads[t].Start();
            }
            foreach (var t in threads) t.Join();
            Check(mismatches == 0, "threads agree (" + mismatches + " mismatches)");

            double checksum = 0;
            for (int f = 0; f < 60; ++f)
                using (var o = rt.Run(new Pt2rt.Input(Frame(f), shape)))
                    foreach (var v in o[0].ToArray<float>()) checksum += v;
            Console.WriteLine("checksum " + checksum.ToString("R", System.Globalization.CultureInfo.InvariantCulture));
        }

        // As a Unity script would: the package from an asset's bytes, outputs into arrays reused every frame.
        {
            byte[] asset = System.IO.File.ReadAllBytes(dir + "/net_dynamic.pt2");
            e = Throws(() => Pt2rt.Runtime.LoadFromMemory(new byte[10], new Pt2rt.Options { OpsLibraries = ops }).Dispose());
            Check(e != null && e.Status == Pt2rt.Status.Package && e.Message.Contains("the package in memory (10 bytes)"),
                  "garbage bytes: " + e);
            e = Throws(() => Pt2rt.Runtime.LoadFromMemory(asset, new Pt2rt.Options { NumRunners = 0 }).Dispose());
            Check(e != null && e.Status == Pt2rt.Status.Usage, "0 runners: " + e);
            e = Throws(() => Pt2rt.Runtime.LoadFromMemory(asset, new Pt2rt.Options { IntraOpThreads = -1 }).Dispose());
            Check(e != null && e.Status == Pt2rt.Status.Usage && e.Message.Contains("intra_op_threads"), "-1 intra-op threads: " + e);
            e = Throws(() => Pt2rt.Runtime.Load(dir + "/op_static.pt2", new Pt2rt.Options { CpuIsa = "no_such_isa", OpsLibraries = ops }).Dispose());
            Check(e != null && e.Status == Pt2rt.Status.Package && e.Message.Contains("no_such_isa"), "unknown ISA: " + e);
            using (var rt = Pt2rt.Runtime.LoadFromMemory(asset, new Pt2rt.Options { NumRunners = 2, OpsLibraries = ops, ReuseRunMemory = true, IntraOpThreads = 1 }))
            // the same intra-op threads: MKL's AVX2 / AVX-512 products round differently at another thread count
            using (var fromFile = Pt2rt.Runtime.Load(dir + "/net_dynamic.pt2", new Pt2rt.Options { OpsLibraries = ops, KeepPackageOpen = false, IntraOpThreads = 1 }))
            {
                Array.Clear(asset, 0, asset.Length);
                var shape = new long[] { 1, 3, 32, 32 };
                var outShape = new long[] { 1, 8, 32, 32 };
                var y = new float[8 * 32 * 32];
                float[] expected;
                using (var o = fromFile.Run(new Pt2rt.Input(Frame(9), shape))) expected = o[0].ToArray<float>();
                rt.RunInto(new[] { new Pt2rt.Input(Frame(9), shape) }, new[] { new Pt2rt.Output(y, outShape) });
                bool same = true;
                for (int k = 0; k < y.Length; ++k) same = same && y[k] == expected[k];
                Check(same, "RunInto from memory equals Run from the file");
                e = Throws(() => rt.RunInto(new[] { new Pt2rt.Input(Frame(9), shape) }, new[] { new Pt2rt.Output(new float[10], outShape) }));
                Check(e != null && e.Status == Pt2rt.Status.Usage, "too small an array: " + e);
                var two = new float[2 * 8 * 32 * 32];
                e = Throws(() => rt.RunInto(new[] { new Pt2rt.Input(Frame(9), shape) }, new[] { new Pt2rt.Output(two, new long[] { 2, 8, 32, 32 }) }));
                Check(e != null && e.Status == Pt2rt.Status.Usage && e.Message.Contains("nothing was written"), "wrong batch: " + e);
                Check(Array.TrueForAll(two, v => v == 0f), "nothing written on a refused RunInto");
            }
        }

        if (failures > 0) { Console.Error.WriteLine(failures + " checks failed"); return 1; }
        Console.WriteLine("all C# checks passed");
        return 0;
    }
}
