-- launch/modulefile.lua -- Lmod modulefile template for sits-dist. `make install` writes a filled-in
-- copy to PREFIX/share/modulefiles/sits-dist/VERSION.lua (@prefix@ and @VERSION@ replaced); a site
-- copies that file into its own MODULEPATH tree, or adds the folder:
--   module use PREFIX/share/modulefiles && module load sits-dist
-- sits-dist links the MPI (and CUDA / NCCL) it was configured with: load the same modules first,
-- or uncomment the depends_on lines below with the site's module names.
help([[
sits-dist @VERSION@ -- distributed tensor-parallel LLM inference server (OpenAI-compatible HTTP API).
  sits-dist --help                       flags (also: man sits-dist)
  sbatch $SITS_DIST_LAUNCH/sits-dist.sbatch MODEL_DIR
  srun --mpi=pmix -n 2 sits-dist --model $SITS_DIST_DEMO_MODEL --prompt "What is a list?"
]])
whatis("Name: sits-dist")
whatis("Version: @VERSION@")
whatis("Description: distributed tensor-parallel LLM inference server (MPI + CUDA/NCCL)")

-- depends_on("openmpi")
-- depends_on("cuda")

local root = "@prefix@"
prepend_path("PATH", "@bindir@")
prepend_path("MANPATH", "@mandir@")
setenv("SITS_DIST_ROOT", root)
setenv("SITS_DIST_LAUNCH", "@pkgdatadir@/launch")
setenv("SITS_DIST_DEMO_MODEL", "@pkgdatadir@/models/demo")
