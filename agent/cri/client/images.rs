//! The image service: looking an image up and pulling it.

use super::*;

impl CriClient {
    /// `ImageStatus`: the image's ID if present.
    pub async fn image_id(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "ImageStatus",
                image,
                CALL_TIMEOUT,
                c.image_status(req(
                    api::ImageStatusRequest {
                        image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
                        verbose: false,
                    },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        Ok(r.image)
    }

    /// `PullImage`; returns the image reference the runtime resolved.
    pub async fn pull_image(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        self.pull_image_with(image, sandbox_config, None).await
    }

    /// `PullImage` with registry credentials (`imagePullSecrets`).
    pub async fn pull_image_with(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
        auth: Option<api::AuthConfig>,
    ) -> Result<String, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "PullImage",
                image,
                PULL_TIMEOUT,
                c.pull_image(req(
                    api::PullImageRequest {
                        image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
                        auth,
                        sandbox_config,
                    },
                    PULL_TIMEOUT,
                )),
            )
            .await?;
        Ok(r.image_ref)
    }
}
